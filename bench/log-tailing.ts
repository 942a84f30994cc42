/**
 * Log tailing against polling on PostgreSQL, one process, an in-memory broker (every publish
 * answers at once), so that what differs is how the dispatcher finds its messages:
 *
 *   npx ts-node --transpile-only bench/log-tailing.ts [rounds]
 *
 * - latency: one writer (an enqueue-only app, so no in-process commit nudge) commits one
 *   message every 5 ms; enqueue to publish, per message, on the database clock's creation time;
 * - burst: 8 writers commit 2 000 messages each in transactions of 10 over 50 keys while the
 *   dispatcher runs; the time until the last is delivered.
 *
 * Modes: 'poll' (the default: LISTEN/NOTIFY wake-ups, 1 s poll) and 'log' (logTailing(), sweep
 * 5 s). Rounds alternate the modes. Needs wal_level = logical and a superuser or REPLICATION role
 * (PGHOST, PGUSER, PGPASSWORD, PGDATABASE; local defaults).
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DataSource } from 'typeorm';
import {
  ensureOutboxTable,
  OutboxModule,
  OutboxService,
  type OutboxPublisher,
  type OutboxRecord,
  type PublishOutcome,
} from '../lib';
import { logTailing, postgresLogNames, postgresLogTailingDdl } from '../lib/log-tailing';
import { outboxTableNames } from '../lib/internal/sql-identifier';
import { sleep } from '../test/support/wait-for';

type Mode = 'poll' | 'log';

class TimingPublisher implements OutboxPublisher {
  readonly latencies: number[] = [];
  delivered = 0;
  lastAt = 0;

  publish(records: readonly OutboxRecord[]): Promise<PublishOutcome[]> {
    const now = Date.now();
    for (const r of records) this.latencies.push(now - r.createdAt.getTime());
    this.delivered += records.length;
    this.lastAt = now;
    return Promise.resolve(records.map(() => ({ ok: true as const })));
  }
}

const TABLE = 'lt_pg_bench';

function dataSource(): DataSource {
  return new DataSource({
    type: 'postgres',
    host: process.env.PGHOST ?? '127.0.0.1',
    port: Number(process.env.PGPORT ?? 5432),
    username: process.env.PGUSER ?? 'postgres',
    password: process.env.PGPASSWORD,
    database: process.env.PGDATABASE ?? 'test',
    poolSize: 12,
  });
}

async function app(
  ds: DataSource,
  options: Omit<Parameters<typeof OutboxModule.forRoot>[0], 'dataSource' | 'tableName'>,
): Promise<INestApplicationContext> {
  @Module({
    imports: [OutboxModule.forRoot({ dataSource: ds, tableName: TABLE, ...options })],
  })
  class BenchModule {}
  return NestFactory.createApplicationContext(BenchModule, { logger: ['error'] });
}

async function fresh(ds: DataSource): Promise<void> {
  const names = postgresLogNames('public', TABLE, process.env.PGDATABASE ?? 'test');
  // A closed reader's server process ends a moment after its client: wait before the drop.
  for (let i = 0; i < 100; i++) {
    const rows: { active: boolean }[] = await ds.query(
      'SELECT active FROM pg_replication_slots WHERE slot_name = $1',
      [names.slot],
    );
    if (rows.every((r) => !r.active)) break;
    await sleep(100);
  }
  await ds.query(
    `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`,
    [names.slot],
  );
  await ds.query(`DROP PUBLICATION IF EXISTS "${names.publication}"`);
  await ds.query(`DROP TABLE IF EXISTS "${TABLE}_attempts", "${TABLE}"`);
  await ensureOutboxTable(ds, { tableName: TABLE });
  for (const s of postgresLogTailingDdl(outboxTableNames(TABLE, null, 'double'), names.publication))
    await ds.query(s);
}

async function round(mode: Mode, scenario: 'latency' | 'burst'): Promise<string> {
  const ds = await dataSource().initialize();
  await fresh(ds);
  const publisher = new TimingPublisher();
  const dispatcher = await app(ds, {
    publisher,
    instanceId: `bench-${mode}`,
    dispatcher: mode === 'log' ? { observe: logTailing() } : {},
  });
  const writer = await app(ds, { workers: false });
  const outbox = writer.get(OutboxService);
  // Let the reader reach the slot (a standby's first ask) before the clock starts.
  await sleep(1_500);
  let total = 0;
  const started = Date.now();
  if (scenario === 'latency') {
    total = 1_000;
    for (let i = 0; i < total; i++) {
      await ds.transaction((m) =>
        outbox.enqueue({ topic: 't', key: `k${i % 20}`, type: 'e', payload: { i } }, m),
      );
      await sleep(5);
    }
  } else {
    total = 8 * 2_000;
    await Promise.all(
      Array.from({ length: 8 }, async (_, w) => {
        for (let tx = 0; tx < 200; tx++) {
          await ds.transaction((m) =>
            outbox.enqueue(
              Array.from({ length: 10 }, (_, i) => ({
                topic: 't',
                key: `k${(w * 10 + i) % 50}`,
                type: 'e',
                payload: { w, tx, i },
              })),
              m,
            ),
          );
        }
      }),
    );
  }
  const committedMs = Date.now() - started;
  const deadline = Date.now() + 120_000;
  while (publisher.delivered < total && Date.now() < deadline) {
    await sleep(20);
  }
  const drainMs = publisher.lastAt - started;
  await dispatcher.close();
  await writer.close();
  await fresh(ds);
  const { publication } = postgresLogNames('public', TABLE, process.env.PGDATABASE ?? 'test');
  await ds.query(`DROP PUBLICATION IF EXISTS "${publication}"`);
  await ds.query(`DROP TABLE IF EXISTS "${TABLE}_attempts", "${TABLE}"`);
  await ds.destroy();
  const sorted = [...publisher.latencies].sort((a, b) => a - b);
  const q = (p: number): number =>
    sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN;
  return scenario === 'latency'
    ? `${mode} latency: ${publisher.delivered}/${total} delivered, p50 ${q(0.5)} ms, p95 ${q(0.95)} ms, p99 ${q(0.99)} ms, max ${sorted[sorted.length - 1]} ms`
    : `${mode} burst: ${publisher.delivered}/${total} delivered, commits took ${committedMs} ms, last delivered at ${drainMs} ms (${Math.round((publisher.delivered / drainMs) * 1000)} msg/s), p50 ${q(0.5)} ms, p99 ${q(0.99)} ms`;
}

async function main(): Promise<void> {
  const rounds = Number(process.argv[2] ?? 2);
  for (let r = 0; r < rounds; r++) {
    for (const mode of (r % 2 === 0 ? ['poll', 'log'] : ['log', 'poll']) as Mode[]) {
      console.log(await round(mode, 'latency'));
      console.log(await round(mode, 'burst'));
    }
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
