/**
 * The dispatcher entry file of test/dispatch/fault-kit.spec.ts, written as a user of the fault
 * kit writes theirs: the OutboxModule with TypeORM and the RabbitMQ publisher, reaching the
 * database and the broker at the endpoints the kit gives (`faultKitEndpoints()`), reporting
 * ready, and closing on SIGTERM. The spec's own settings come in OUTBOX_FAULT_KIT_CHILD (JSON).
 */
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { DataSource } from 'typeorm';
import {
  OutboxModule,
  type OutboxPublisher,
  type OutboxRecord,
  type PublishOutcome,
} from '../../../lib';
import { RabbitMqPublisher } from '../../../lib/publishers/rabbitmq';
import { faultKitEndpoints, reportDispatcherReady } from '../../../lib/testing';

export interface FaultKitChildConfig {
  readonly db: 'postgres' | 'mariadb' | 'sqlite';
  readonly sqlitePath?: string;
  readonly table: string;
  readonly queue: string;
  readonly instanceId: string;
  /**
   * A broken publisher, for the spec's proof that the kit can fail: every `dropEvery`-th message
   * is reported published and never sent.
   */
  readonly dropEvery?: number;
}

/** Answers ok for every `every`-th message without sending it: a publisher that loses messages. */
class DroppingPublisher implements OutboxPublisher {
  private seen = 0;

  constructor(
    private readonly inner: OutboxPublisher,
    private readonly every: number,
  ) {}

  async publish(
    records: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    const dropped = records.map(() => ++this.seen % this.every === 0);
    const sent = await this.inner.publish(
      records.filter((_, i) => !dropped[i]),
      signal,
    );
    let next = 0;
    return dropped.map((drop) => (drop ? { ok: true as const } : (sent[next++] as PublishOutcome)));
  }
}

const config = JSON.parse(process.env.OUTBOX_FAULT_KIT_CHILD ?? '{}') as FaultKitChildConfig;
const { database, broker } = faultKitEndpoints();

function dataSource(): DataSource {
  if (config.db === 'sqlite')
    return new DataSource({
      type: 'better-sqlite3',
      database: config.sqlitePath ?? '',
      enableWAL: true,
      timeout: 5_000,
    });
  if (database === undefined) throw new Error('no database endpoint from the fault kit');
  return config.db === 'postgres'
    ? new DataSource({
        type: 'postgres',
        ...database,
        username: process.env.PGUSER ?? 'postgres',
        password: process.env.PGPASSWORD,
        database: process.env.PGDATABASE ?? 'test',
        poolSize: 5,
      })
    : new DataSource({
        type: 'mariadb',
        ...database,
        username: process.env.MYSQL_USER ?? 'root',
        password: process.env.MYSQL_PASSWORD ?? '',
        database: process.env.MYSQL_DATABASE ?? 'test',
        poolSize: 5,
      });
}

const broken = (publisher: OutboxPublisher): OutboxPublisher =>
  config.dropEvery === undefined ? publisher : new DroppingPublisher(publisher, config.dropEvery);

async function main(): Promise<void> {
  if (broker === undefined) throw new Error('no broker endpoint from the fault kit');
  const ds = await dataSource().initialize();
  const user = process.env.RABBITMQ_USER ?? 'guest';
  const password = process.env.RABBITMQ_PASSWORD ?? 'guest';
  const app = await NestFactory.createApplicationContext(
    OutboxModule.forRoot({
      dataSource: ds,
      tableName: config.table,
      instanceId: config.instanceId,
      autoStart: true,
      publisher: broken(
        new RabbitMqPublisher({
          url: `amqp://${user}:${password}@${broker.host}:${broker.port}`,
          assertTopology: async (channel) => {
            await channel.assertQueue(config.queue, { durable: false });
          },
          reconnect: { initialDelayMs: 100, maxDelayMs: 1_000 },
          publishTimeoutMs: 1_500,
        }),
      ),
      dispatcher: {
        batchSize: 50,
        pollIntervalMs: 50,
        leaseMs: 5_000,
        publishTimeoutMs: 2_000,
        maxOutagePauseMs: 500,
      },
    }),
    { logger: ['error', 'fatal'] },
  );
  let stopping = false;
  process.on('SIGTERM', () => {
    if (stopping) return;
    stopping = true;
    void app
      .close()
      .then(() => ds.destroy())
      .finally(() => process.exit(0));
  });
  reportDispatcherReady();
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
