import { randomUUID } from 'node:crypto';
import { TransactionalAdapterDrizzleOrm } from '@nestjs-cls/transactional-adapter-drizzle-orm';
import { TransactionalAdapterPrisma } from '@nestjs-cls/transactional-adapter-prisma';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { DataSource, type EntityManager } from 'typeorm';
import { typeormConnection } from '../../lib/typeorm/typeorm.connection';
import { mysqlTable, varchar } from 'drizzle-orm/mysql-core';
import { pgTable, text } from 'drizzle-orm/pg-core';
import { drizzleOutbox } from '../../lib/connections/drizzle';
import { prismaOutbox } from '../../lib/connections/prisma';
import type { TransactionalAdapterLike } from '../../lib/integrations/cls';
import type { OutboxConnection } from '../../lib/store/ports/outbox-connection';
import { serverConnection, uniqueTable } from '../support/databases';
import type { ServiceName } from '../support/services';
import { pgPool } from '../connections/driver-targets';
import { drizzleOnMariadb, drizzleOnPostgres, mysqlPool } from '../connections/drizzle-targets';
import { openPrisma, PRISMA_ORDERS, type PrismaTestClient } from '../connections/prisma-targets';

// The libraries that have a transactional adapter of @nestjs-cls/transactional on the registry
// and a connection of ours: each opened the way an app wires it (the client under an injection
// token, the adapter on that token), with the business write made through the adapter's `tx`.

/** The injection token the specs provide the library's client under. */
export const CLIENT = Symbol('test:client');

/** One library on one database, opened. */
export interface ClsLibrary {
  readonly client: object;
  /** The module's connection for the library; its `sql` also serves the specs' own queries. */
  readonly connection: OutboxConnection<unknown>;
  /** Given to OutboxModule as `dataSource` instead of `connection` (TypeORM). */
  readonly dataSource?: DataSource;
  /** The library's adapter, on {@link CLIENT}. */
  adapter(): TransactionalAdapterLike;
  /** The business write, through the adapter's `tx` inside a transaction. */
  insertOrder(tx: unknown, id: string): Promise<void>;
  readonly ordersTable: string;
  readonly ordersDdl: string;
  /** Placeholder of parameter n in the database's SQL. */
  placeholder(n: number): string;
  close(): Promise<void>;
}

export interface ClsTarget {
  readonly name: string;
  readonly services: readonly ServiceName[];
  open(): Promise<ClsLibrary>;
}

export const prismaPostgres: ClsTarget = {
  name: 'Prisma on PostgreSQL (@nestjs-cls/transactional-adapter-prisma)',
  services: ['postgres'],
  open() {
    const prisma = openPrisma();
    return Promise.resolve({
      client: prisma,
      connection: prismaOutbox(prisma),
      adapter: () =>
        new TransactionalAdapterPrisma<PrismaTestClient>({
          prismaInjectionToken: CLIENT,
          sqlFlavor: 'postgresql', // savepoints, for Propagation.Nested
        }),
      insertOrder: async (tx, id) => {
        await (tx as PrismaTestClient).order.create({ data: { id } });
      },
      ordersTable: PRISMA_ORDERS,
      ordersDdl: `CREATE TABLE IF NOT EXISTS ${PRISMA_ORDERS} (id text PRIMARY KEY)`,
      placeholder: (n) => `$${n}`,
      close: () => prisma.$disconnect(),
    });
  },
};

export const drizzlePostgres: ClsTarget = {
  name: 'Drizzle on PostgreSQL (@nestjs-cls/transactional-adapter-drizzle-orm)',
  services: ['postgres'],
  open() {
    const pool = pgPool(8);
    const db = drizzleOnPostgres(pool);
    const orders = uniqueTable('orders_cls');
    const table = pgTable(orders, { id: text('id').primaryKey() });
    return Promise.resolve({
      client: db,
      connection: drizzleOutbox(db),
      adapter: () =>
        new TransactionalAdapterDrizzleOrm<typeof db>({ drizzleInstanceToken: CLIENT }),
      insertOrder: async (tx, id) => {
        await (tx as typeof db).insert(table).values({ id });
      },
      ordersTable: orders,
      ordersDdl: `CREATE TABLE ${orders} (id text PRIMARY KEY)`,
      placeholder: (n) => `$${n}`,
      close: () => pool.end(),
    });
  },
};

export const drizzleMariadb: ClsTarget = {
  name: 'Drizzle on MariaDB (@nestjs-cls/transactional-adapter-drizzle-orm)',
  services: ['mariadb'],
  open() {
    const pool = mysqlPool(8);
    const db = drizzleOnMariadb(pool);
    const orders = uniqueTable('orders_cls');
    const table = mysqlTable(orders, { id: varchar('id', { length: 64 }).primaryKey() });
    return Promise.resolve({
      client: db,
      connection: drizzleOutbox(db),
      adapter: () =>
        new TransactionalAdapterDrizzleOrm<typeof db>({ drizzleInstanceToken: CLIENT }),
      insertOrder: async (tx, id) => {
        await (tx as typeof db).insert(table).values({ id });
      },
      ordersTable: orders,
      ordersDdl: `CREATE TABLE ${orders} (id varchar(64) PRIMARY KEY)`,
      placeholder: () => '?',
      close: () => pool.end(),
    });
  },
};

export const typeormPostgres: ClsTarget = {
  name: 'TypeORM on PostgreSQL (@nestjs-cls/transactional-adapter-typeorm)',
  services: ['postgres'],
  async open() {
    const dataSource = new DataSource({ ...serverConnection('postgres'), poolSize: 8 });
    await dataSource.initialize();
    const orders = uniqueTable('orders_cls');
    return {
      client: dataSource,
      dataSource,
      connection: typeormConnection(dataSource),
      adapter: () => new TransactionalAdapterTypeOrm({ dataSourceToken: CLIENT }),
      insertOrder: async (tx, id) => {
        await (tx as EntityManager).query(`INSERT INTO ${orders} (id) VALUES ($1)`, [id]);
      },
      ordersTable: orders,
      ordersDdl: `CREATE TABLE ${orders} (id text PRIMARY KEY)`,
      placeholder: (n) => `$${n}`,
      close: () => dataSource.destroy(),
    };
  },
};

/**
 * An order id unique across runs and spec files: the Prisma orders table is shared and kept,
 * and uniqueTable's counter starts again in every spec file of one jest process.
 */
export function uniqueOrderId(prefix = 'order'): string {
  return `${prefix}_${randomUUID()}`;
}
