/**
 * A separate process running one dispatcher: its own Nest application context, its own
 * DataSource, and a real TCP transport (`ClientTCP` + `ClientProxyPublisher`) to the parent's
 * consumer. Started by test/support/children/spawn-dispatcher.ts with `node -r
 * test/support/children/register-ts.js`; configured through the OUTBOX_CHILD environment variable
 * (JSON, see ChildConfig) and talks to the parent over the IPC channel.
 */
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { ClientTCP } from '@nestjs/microservices';
import { DataSource } from 'typeorm';
import {
  OutboxModule,
  type OutboxBatchReport,
  type OutboxPublisher,
  type OutboxRecord,
  type PublishOutcome,
} from '../../lib';
import { ClientProxyPublisher } from '../../lib/publishers/microservices';
import { logTailing } from '../../lib/log-tailing';
import { reportDispatcherReady } from '../../lib/testing/dispatcher.process';
import type { ChildConfig, ChildMessage, ParentMessage } from './children/child-protocol';

const config = JSON.parse(process.env.OUTBOX_CHILD ?? '{}') as ChildConfig;

function tell(message: ChildMessage): void {
  process.send?.(message);
}

function dataSource(): DataSource {
  switch (config.db) {
    case 'postgres':
      return new DataSource({
        type: 'postgres',
        host: process.env.PGHOST ?? '127.0.0.1',
        port: Number(process.env.PGPORT ?? 5432),
        username: process.env.PGUSER ?? 'postgres',
        password: process.env.PGPASSWORD,
        database: process.env.PGDATABASE ?? 'test',
        poolSize: 5,
      });
    case 'mariadb':
      return new DataSource({
        type: 'mariadb',
        host: process.env.MYSQL_HOST ?? '127.0.0.1',
        port: Number(process.env.MYSQL_PORT ?? 3306),
        username: process.env.MYSQL_USER ?? 'root',
        password: process.env.MYSQL_PASSWORD ?? '',
        database: process.env.MYSQL_DATABASE ?? 'test',
        poolSize: 5,
      });
    case 'sqlite':
      return new DataSource({
        type: 'better-sqlite3',
        database: config.sqlitePath ?? '',
        enableWAL: true,
        timeout: 5_000,
      });
  }
}

/**
 * Publishes normally until `after` messages went out; the batch that crosses the mark publishes
 * its first half for real, reports, and then never answers (the parent SIGKILLs the process).
 */
class HangingPublisher implements OutboxPublisher {
  private published = 0;
  private hung = false;

  constructor(
    private readonly inner: OutboxPublisher,
    private readonly after: number,
  ) {}

  async publish(
    records: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    if (this.hung || this.published + records.length <= this.after) {
      const outcomes = await this.inner.publish(records, signal);
      this.published += outcomes.filter((o) => o.ok).length;
      return outcomes;
    }
    this.hung = true;
    const half = records.slice(0, Math.ceil(records.length / 2));
    const outcomes = await this.inner.publish(half, signal);
    tell({
      type: 'hanging',
      claimed: records.map((r) => r.messageId),
      published: half.filter((_, i) => outcomes[i]?.ok === true).map((r) => r.messageId),
    });
    return new Promise<never>(() => undefined);
  }
}

async function main(): Promise<void> {
  const ds = dataSource();
  await ds.initialize();
  const client = new ClientTCP({ host: '127.0.0.1', port: config.tcpPort });
  const tcp = new ClientProxyPublisher(client, {
    timeoutMs: config.publishTimeoutMs ?? 5_000,
    mode: config.ack === true ? 'send' : 'emit',
  });
  const publisher =
    config.hangAfter === undefined ? tcp : new HangingPublisher(tcp, config.hangAfter);
  const totals = {
    batches: 0,
    claimed: 0,
    published: 0,
    fenced: 0,
    released: 0,
    retried: 0,
    deadLettered: 0,
  };
  const app = await NestFactory.createApplicationContext(
    OutboxModule.forRoot({
      dataSource: ds,
      tableName: config.table,
      publisher,
      instanceId: config.instanceId,
      autoStart: true,
      dispatcher: config.dispatcher,
      ...(config.logTailing === undefined ? {} : { delivery: logTailing(config.logTailing) }),
      retry: config.retry,
      observer: {
        onBatch: (r: OutboxBatchReport) => {
          totals.batches += 1;
          totals.claimed += r.claimed;
          totals.published += r.published;
          totals.fenced += r.fenced;
          totals.released += r.released;
          totals.retried += r.retried;
          totals.deadLettered += r.deadLettered;
        },
      },
    }),
    { logger: ['error', 'fatal'] },
  );

  let stopping = false;
  const stop = async (): Promise<void> => {
    if (stopping) return;
    stopping = true;
    await app.close();
    client.close();
    await ds.destroy();
    tell({ type: 'stopped', totals });
    process.disconnect?.();
  };
  process.on('message', (message: ParentMessage) => {
    if (message.type === 'stop')
      void stop().catch((error: unknown) => tell({ type: 'error', error: String(error) }));
  });
  process.on('SIGTERM', () => void stop());
  // Orphaned (the parent died): shut down instead of dispatching forever.
  process.on('disconnect', () => void stop().finally(() => process.exit(0)));
  reportDispatcherReady();
}

main().catch((error: unknown) => {
  tell({
    type: 'error',
    error: error instanceof Error ? (error.stack ?? error.message) : String(error),
  });
  process.exitCode = 1;
  process.disconnect?.();
});
