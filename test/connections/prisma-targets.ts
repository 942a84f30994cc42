import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrismaBetterSqlite3 } from '@prisma/adapter-better-sqlite3';
import { PrismaMariaDb } from '@prisma/adapter-mariadb';
import { PrismaPg } from '@prisma/adapter-pg';
import { prismaOutbox, type PrismaClientLike } from '../../lib/connections/prisma';
import type { StoreConformanceTarget } from '../../lib/testing';
import { serverConnection } from '../support/databases';
import { sqliteFile } from './driver-targets';

// Prisma 7 on each test database, the way an app makes it: the generated client (prisma-client
// generator, no query engine) on the database's driver adapter: node-postgres, mariadb,
// better-sqlite3.

/** A test database of Prisma's, each with its own schema (provider) and generated client. */
export type PrismaTestDatabase = 'postgres' | 'mariadb' | 'sqlite';

const SCHEMAS: Record<PrismaTestDatabase, { schema: string; output: string }> = {
  postgres: { schema: 'schema.prisma', output: 'generated' },
  mariadb: { schema: 'schema.mysql.prisma', output: 'generated-mysql' },
  sqlite: { schema: 'schema.sqlite.prisma', output: 'generated-sqlite' },
};

/** The table of the schemas' one model (`Order`). */
export const PRISMA_ORDERS = 'outbox_prisma_orders';

type DriverAdapter = PrismaPg | PrismaMariaDb | PrismaBetterSqlite3;

/**
 * The generated client's module, generated first when missing. `prisma generate` needs no engine
 * for this generator but still fetches the schema engine from Prisma's binary host, which this
 * project's machines cannot reach: a stub stands in for it (generate never runs it).
 */
export function prismaClientModule(database: PrismaTestDatabase = 'postgres'): {
  PrismaClient: new (options: { adapter: DriverAdapter }) => PrismaTestClient;
} {
  const { schema, output } = SCHEMAS[database];
  const client = join(__dirname, 'prisma', output, 'client.ts');
  const lock = join(__dirname, 'prisma', `.generating-${output}`);
  // While another worker generates, client.ts may be there before the rest: wait for its lock.
  if (!existsSync(client) || existsSync(lock)) {
    generateOnce(join(__dirname, 'prisma', schema), client, lock);
  }
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require(client) as ReturnType<typeof prismaClientModule>;
}

/**
 * Runs `prisma generate` in one jest worker at a time: the first takes the lock directory, the
 * others wait for it to go (two generators writing one folder could leave it half written).
 */
function generateOnce(schema: string, client: string, lock: string): void {
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`${lock} held for 2 minutes: remove it`);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
    }
  }
  try {
    if (!existsSync(client)) generate(schema);
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

function generate(schema: string): void {
  const env = { ...process.env };
  if (env.PRISMA_SCHEMA_ENGINE_BINARY === undefined) {
    const stub = join(mkdtempSync(join(tmpdir(), 'outbox-prisma-')), 'schema-engine');
    writeFileSync(
      stub,
      '#!/bin/sh\necho "schema engine stub: not needed by generate" >&2\nexit 1\n',
    );
    chmodSync(stub, 0o755);
    env.PRISMA_SCHEMA_ENGINE_BINARY = stub;
  }
  execFileSync(
    join(__dirname, '..', '..', 'node_modules', '.bin', 'prisma'),
    ['generate', '--schema', schema],
    { env, stdio: 'pipe' },
  );
}

/** The generated PrismaClient, as far as the specs use it. */
export interface PrismaTestClient extends PrismaClientLike {
  $disconnect(): Promise<void>;
  order: { create(args: { data: { id: string } }): Promise<{ id: string }> };
}

/**
 * A PrismaClient on `database`. SQLite: on `file` (made by the caller, in WAL mode), where the
 * dispatcher opens its own connection.
 */
export function openPrisma(
  database: PrismaTestDatabase = 'postgres',
  file?: string,
): PrismaTestClient {
  const { PrismaClient } = prismaClientModule(database);
  if (database === 'sqlite') {
    if (file === undefined) throw new Error('openPrisma(sqlite) needs the database file');
    return new PrismaClient({ adapter: new PrismaBetterSqlite3({ url: `file:${file}` }) });
  }
  const c = serverConnection(database);
  const settings = {
    host: c.host,
    port: c.port,
    user: c.username,
    password: c.password,
    database: c.database,
  };
  return new PrismaClient({
    adapter:
      database === 'postgres'
        ? new PrismaPg({ ...settings, max: 8 })
        : new PrismaMariaDb({ ...settings, connectionLimit: 8 }),
  });
}

/**
 * prismaOutbox(prisma) on `database`: its port, and the app's transactions as
 * prisma.$transaction(…). SQLite: a fresh file for each case.
 */
export function prismaTarget(database: PrismaTestDatabase): StoreConformanceTarget {
  return {
    name: `prisma-${database}`,
    setUp() {
      const sqlite = database === 'sqlite' ? sqliteFile() : undefined;
      const prisma = openPrisma(database, sqlite?.file);
      const connection = prismaOutbox(prisma);
      return Promise.resolve({
        sql: connection.sql,
        inTransaction: (work) => prisma.$transaction((tx) => work(connection.join(tx))),
        tearDown: async () => {
          await prisma.$disconnect();
          sqlite?.remove();
        },
      });
    },
  };
}
