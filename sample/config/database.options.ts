import type { DataSourceOptions } from 'typeorm';
import { outboxMigrations } from '../../lib/schema';
import { CreateOrdersTable1763800000100 } from '../migrations/create-orders-table.migration';
import { Order } from '../orders/order.entity';
import type { DatabaseConfig } from './sample.config';

/**
 * The TypeORM DataSource of the sample. Migrations run at startup: the outbox table from the
 * library's migration, then the orders table.
 */
export function dataSourceOptions(db: DatabaseConfig): DataSourceOptions {
  const schema = db.type === 'postgres' ? db.schema : undefined;
  const common = {
    entities: [Order],
    migrations: [...outboxMigrations({ schema }), CreateOrdersTable1763800000100],
    migrationsRun: true,
  };
  switch (db.type) {
    case 'sqlite':
      // WAL lets the dispatcher's own connection read while the app writes; `timeout` is the busy wait.
      return {
        ...common,
        type: 'better-sqlite3',
        database: db.path,
        enableWAL: true,
        timeout: 5_000,
      };
    case 'postgres':
      return { ...common, type: 'postgres', url: db.url, schema };
    case 'mysql':
    case 'mariadb':
      return { ...common, type: db.type, url: db.url };
  }
}
