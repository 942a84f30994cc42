import { EntitySchema, MikroORM as MikroOrmCore, type Options } from '@mikro-orm/core';
import { MariaDbDriver } from '@mikro-orm/mariadb';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { mikroOrmOutbox } from '../../lib/orm/mikro-orm';
import type { StoreConformanceTarget } from '../../lib/testing';
import { serverConnection } from '../support/databases';

// MikroORM 6 on each server database, the way an app initialises it, with one entity (an order)
// for the business writes.

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

export async function openMikroOrm(
  database: 'postgres' | 'mariadb',
  ordersTable = 'outbox_mikro_unused',
  extra: Partial<Options> = {},
): Promise<MikroOrmCore> {
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
export function mikroOrmTarget(database: 'postgres' | 'mariadb'): StoreConformanceTarget {
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
