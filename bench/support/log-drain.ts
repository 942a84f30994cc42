/**
 * One timed drain of a prefilled backlog by the module as an app runs it (`dispatcher.start()`,
 * then its own loop: the log's reader or the poll), or by the bare pipelined relay, on PostgreSQL
 * or MariaDB, to RabbitMQ or Kafka (L1, L4).
 */
import type { OutboxPublisher } from '../../lib';
import { logTailing, type LogTailingOptions } from '../../lib/log-tailing';
import { bareKafkaRelay, bareRabbitRelay } from '../baselines/bare-relay';
import {
  bareMariaKafkaRelay,
  bareMariaRabbitRelay,
  mariaPool,
} from '../baselines/bare-relay-mariadb';
import type { Pool as MariaPool } from 'mysql2/promise';
import { pendingCount, pgPool } from './databases';
import type { Pool } from './pg';
import type { Producer } from 'kafkajs';
import { readerReady, type LogTarget } from './log-tailing';
import { connectPublisher, kafkaPublisher, rabbitPublisher, startOutboxApp } from './outbox-app';
import type { ConfirmLink } from './rabbit';
import { sleep } from '../../test/support/wait-for';

export type Broker = 'rabbitmq' | 'kafka';

/** The library's publisher to `destination` (a queue or a topic). */
export function publisherFor(broker: Broker, destination: string): OutboxPublisher {
  return broker === 'rabbitmq' ? rabbitPublisher(destination) : kafkaPublisher(destination);
}

export interface AppDrain {
  readonly seconds: number;
  /** Messages the dispatcher reported published (its observer's batches). */
  readonly published: number;
  /** Outages the dispatcher reported during the drain. */
  readonly outages: number;
}

/**
 * Starts a fresh app on `table` (ordering on; log tailing with `log`, else the defaults: polling
 * with LISTEN/NOTIFY on PostgreSQL), its publisher connected first, and times from
 * `dispatcher.start()` until its batches published `n` messages and nothing is pending.
 */
export async function appDrain(options: {
  readonly target: LogTarget;
  readonly table: string;
  readonly broker: Broker;
  readonly destination: string;
  readonly n: number;
  readonly instanceId: string;
  readonly log?: LogTailingOptions;
  /** `dispatcher.claims: 'partitions'`, publishing as a stream of this window. */
  readonly partitionsWindow?: number;
  readonly timeoutMs?: number;
}): Promise<AppDrain> {
  const { target, table, n } = options;
  const publisher = publisherFor(options.broker, options.destination);
  let published = 0;
  const app = await startOutboxApp({
    dataSource: target.ds,
    tableName: table,
    publisher,
    autoStart: false,
    instanceId: options.instanceId,
    ordering: { enabled: true },
    ...(options.log === undefined ? {} : { delivery: logTailing(options.log) }),
    ...(options.partitionsWindow === undefined
      ? {}
      : { dispatcher: { claims: 'partitions', publishWindow: options.partitionsWindow } }),
    observer: {
      onBatch: (report) => {
        published += report.published;
      },
    },
  });
  try {
    await connectPublisher(publisher);
    const dispatcher = app.dispatcher;
    if (dispatcher === undefined) throw new Error('no dispatcher');
    const deadline = Date.now() + (options.timeoutMs ?? 300_000);
    const started = performance.now();
    await dispatcher.start();
    for (;;) {
      if (published >= n && (await pendingCount(target.ds, table)) === 0) break;
      if (Date.now() > deadline)
        throw new Error(`${options.instanceId}: ${published}/${n} published before the timeout`);
      await sleep(published >= n ? 20 : 5);
    }
    return { seconds: (performance.now() - started) / 1000, published, outages: app.outages.count };
  } finally {
    await app.close();
  }
}

/**
 * Starts an app reading `table`'s log and closes it once its reader reads: the slot is made (or
 * the binlog position stored), so that what commits from now on is read from the log.
 */
export async function makeLogPosition(options: {
  readonly target: LogTarget;
  readonly table: string;
  readonly broker: Broker;
  readonly destination: string;
  readonly log: LogTailingOptions;
}): Promise<void> {
  const app = await startOutboxApp({
    dataSource: options.target.ds,
    tableName: options.table,
    publisher: publisherFor(options.broker, options.destination),
    instanceId: 'bench-log-position',
    ordering: { enabled: true },
    delivery: logTailing(options.log),
  });
  try {
    await readerReady(options.target, options.table);
  } finally {
    await app.close();
  }
}

/**
 * The bare pipelined relay of `target`'s dialect, its pool kept across drains (opened before the
 * first one is timed, as the module's DataSource is).
 */
export class BareRelay {
  private readonly pg: Pool | undefined;
  private readonly maria: MariaPool | undefined;

  constructor(private readonly target: LogTarget) {
    if (target.name === 'postgres') this.pg = pgPool(4);
    else this.maria = mariaPool(4);
  }

  /** Drains `table` into `destination`; resolves to the seconds it took. */
  async drain(options: {
    readonly table: string;
    readonly broker: Broker;
    readonly destination: string;
    readonly link: ConfirmLink;
    readonly producer: Producer | undefined;
  }): Promise<number> {
    const { table, broker, destination, producer } = options;
    if (broker === 'kafka' && producer === undefined) throw new Error('no Kafka producer');
    const window = broker === 'rabbitmq' ? (await options.link.get()).window : undefined;
    const started = performance.now();
    if (this.pg !== undefined) {
      const pool = this.pg;
      if (window !== undefined) await bareRabbitRelay({ pool, table, window, queue: destination });
      else if (producer !== undefined)
        await bareKafkaRelay({ pool, table, producer, topic: destination });
    } else if (this.maria !== undefined) {
      const pool = this.maria;
      if (window !== undefined)
        await bareMariaRabbitRelay({ pool, table, window, queue: destination });
      else if (producer !== undefined)
        await bareMariaKafkaRelay({ pool, table, producer, topic: destination });
    }
    return (performance.now() - started) / 1000;
  }

  async close(): Promise<void> {
    await this.pg?.end();
    await this.maria?.end();
  }
}
