import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrismaPg } from '@prisma/adapter-pg';
import { prismaOutbox, type PrismaClientLike } from '../../lib/orm/prisma';
import type { StoreConformanceTarget } from '../../lib/testing';
import { serverConnection } from '../support/databases';

// Prisma 7 on PostgreSQL, the way an app makes it: the generated client (prisma-client
// generator, no query engine) on the node-postgres driver adapter.

const SCHEMA = join(__dirname, 'prisma', 'schema.prisma');
const CLIENT = join(__dirname, 'prisma', 'generated', 'client.ts');
const LOCK = join(__dirname, 'prisma', '.generating');

/** The table of the schema's one model (`Order`). */
export const PRISMA_ORDERS = 'outbox_prisma_orders';

/**
 * The generated client's module, generated first when missing. `prisma generate` needs no engine
 * for this generator but still fetches the schema engine from Prisma's binary host, which this
 * project's machines cannot reach: a stub stands in for it (generate never runs it).
 */
export function prismaClientModule(): {
  PrismaClient: new (options: { adapter: PrismaPg }) => PrismaTestClient;
} {
  // While another worker generates, client.ts may be there before the rest: wait for its lock.
  if (!existsSync(CLIENT) || existsSync(LOCK)) generateOnce();
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require(CLIENT) as ReturnType<typeof prismaClientModule>;
}

/**
 * Runs `prisma generate` in one jest worker at a time: the first takes the lock directory, the
 * others wait for it to go (two generators writing one folder could leave it half written).
 */
function generateOnce(): void {
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      mkdirSync(LOCK);
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`${LOCK} held for 2 minutes: remove it`);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
    }
  }
  try {
    if (!existsSync(CLIENT)) generate();
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
}

function generate(): void {
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
    ['generate', '--schema', SCHEMA],
    { env, stdio: 'pipe' },
  );
}

/** The generated PrismaClient, as far as the specs use it. */
export interface PrismaTestClient extends PrismaClientLike {
  $disconnect(): Promise<void>;
  order: { create(args: { data: { id: string } }): Promise<{ id: string }> };
}

export function openPrisma(): PrismaTestClient {
  const c = serverConnection('postgres');
  const { PrismaClient } = prismaClientModule();
  return new PrismaClient({
    adapter: new PrismaPg({
      host: c.host,
      port: c.port,
      user: c.username,
      password: c.password,
      database: c.database,
      max: 8,
    }),
  });
}

/** prismaOutbox(prisma): its port, and the app's transactions as prisma.$transaction(…). */
export const prismaTarget: StoreConformanceTarget = {
  name: 'prisma-postgres',
  setUp() {
    const prisma = openPrisma();
    const connection = prismaOutbox(prisma);
    return Promise.resolve({
      sql: connection.sql,
      inTransaction: (work) => prisma.$transaction((tx) => work(connection.join(tx))),
      tearDown: () => prisma.$disconnect(),
    });
  },
};
