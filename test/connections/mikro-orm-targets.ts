import { BetterSqliteDriver } from '@mikro-orm/better-sqlite';
import { EntitySchema, MikroORM as MikroOrmCore, type Options } from '@mikro-orm/core';
import { MariaDbDriver } from '@mikro-orm/mariadb';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { mikroOrmOutbox } from '../../lib/connections/mikro-orm';
import type { StoreConformanceTarget } from '../../lib/testing';
import { serverConnection } from '../support/databases';
import { sqliteFile } from './driver-targets';

// MikroORM 6 on each test database, the way an app initialises it, with one entity (an order)
// for the business writes: @mikro-orm/postgresql, @mikro-orm/mariadb, @mikro-orm/better-sqlite.

export type MikroOrmTestDatabase = 'postgres' | 'mariadb' | 'sqlite';

export interface TestOrder {
  id: string;
}

export function orderSchema(tableName: string): EntitySchema<TestOrder> {
  return new EntitySchema<TestOrder>({
    name: `Order_${tableName}`,
    tableName,
    properties: { id: { type: 'string', primary: true } },
  });
}

/**
 * MikroORM on `database`; `close()` closes it (and removes the SQLite file). SQLite: on a fresh
 * file in WAL mode.
 */
export async function openMikroOrm(
  database: MikroOrmTestDatabase,
  ordersTable = 'outbox_mikro_unused',
  extra: Partial<Options> = {},
): Promise<MikroOrmCore> {
  if (database === 'sqlite') {
    const sqlite = sqliteFile();
    const orm = await MikroOrmCore.init({
      driver: BetterSqliteDriver,
      dbName: sqlite.file,
      entities: [orderSchema(ordersTable)],
      ...extra,
    });
    const close = orm.close.bind(orm);
    orm.close = async (force?: boolean) => {
      await close(force);
      sqlite.remove();
    };
    return orm;
  }
  const c = serverConnection(database);
  return MikroOrmCore.init({
    driver: database === 'postgres' ? PostgreSqlDriver : MariaDbDriver,
    host: c.host,
    port: c.port,
    user: c.username,
    password: c.password,
    dbName: c.database,
    entities: [orderSchema(ordersTable)],
    pool: { min: 0, max: 8 },
    ...extra,
  });
}

/** mikroOrmOutbox(orm): its port, and the app's transactions as em.transactional(…) forks. */
export function mikroOrmTarget(database: MikroOrmTestDatabase): StoreConformanceTarget {
  return {
    name: `mikro-orm-${database}`,
    async setUp() {
      const orm = await openMikroOrm(database);
      const connection = mikroOrmOutbox(orm);
      return {
        sql: connection.sql,
        inTransaction: (work) => orm.em.transactional((em) => work(connection.join(em))),
        tearDown: () => orm.close(true),
      };
    },
  };
}
