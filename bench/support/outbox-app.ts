/** The real OutboxModule in a Nest application context, and timing hooks around its parts. */
import { Module, type INestApplicationContext, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { DataSource } from 'typeorm';
import {
  OutboxDispatcher,
  OutboxModule,
  OutboxService,
  type OutboxModuleOptions,
  type OutboxPublisher,
} from '../../lib';
import { OUTBOX_STORE } from '../../lib/outbox.constants';
import { type OutboxStore } from '../../lib/store/ports/outbox-store.port';
import { KafkaPublisher } from '../../lib/publishers/kafka';
import { RabbitMqPublisher, type RabbitMqPublisherOptions } from '../../lib/publishers/rabbitmq';
import { SERVICES } from './config';
import { pendingCount } from './databases';
import { sleep } from '../../test/support/wait-for';

export interface OutboxApp {
  readonly app: INestApplicationContext;
  /** Broker or database outages the dispatcher reported (a run they hit is repeated). */
  readonly outages: { count: number };
  readonly dispatcher: OutboxDispatcher | undefined;
  readonly outbox: OutboxService;
  readonly store: OutboxStore;
  close(): Promise<void>;
}

export type AppOptions = Omit<OutboxModuleOptions, 'dataSource'> & {
  dataSource: DataSource;
  workers?: boolean;
  /** The app's Nest logger (L3 counts the log reader's lines). @default errors and warnings to the console */
  logger?: LoggerService;
};

/**
 * The bench's variants name their mode: one that gives none measures row leases, as every
 * figure in HISTORY before 'partitions' became PostgreSQL's default did (its tables have every
 * schema step). A variant asks for 'partitions' itself, or for a window, which implies it.
 */
function benchMode(options: Omit<AppOptions, 'dataSource'>): OutboxModuleOptions['dispatcher'] {
  const given = options.dispatcher ?? {};
  if (given.claims !== undefined || given.publishWindow !== undefined) return given;
  if (options.delivery === 'external') return given;
  return { ...given, claims: 'leases' };
}

export async function startOutboxApp(options: AppOptions): Promise<OutboxApp> {
  const { workers = true, logger, ...rest } = options;
  const outages = { count: 0 };
  const observer = {
    ...rest.observer,
    onOutage: (error: unknown, pauseMs: number): void => {
      outages.count++;
      rest.observer?.onOutage?.(error, pauseMs);
    },
  };

  @Module({
    imports: [OutboxModule.forRoot({ ...rest, dispatcher: benchMode(rest), observer, workers })],
  })
  class BenchOutboxModule {}

  const app = await NestFactory.createApplicationContext(BenchOutboxModule, {
    logger: logger ?? ['error', 'warn'],
  });
  return {
    app,
    outages,
    dispatcher: workers ? app.get(OutboxDispatcher) : undefined,
    outbox: app.get(OutboxService),
    store: app.get<OutboxStore>(OUTBOX_STORE),
    close: () => app.close(),
  };
}

const WARMUP_TOPIC = '__bench_warmup';

/** The library's own RabbitMQ publisher, on the default exchange (routing key = queue). */
export function rabbitPublisher(
  queue: string,
  options: Pick<RabbitMqPublisherOptions, 'outboxHeaders' | 'cloudEvents'> = {},
): RabbitMqPublisher {
  return new RabbitMqPublisher({
    url: SERVICES.rabbitmq.url,
    routingKey: (r) => (r.topic === WARMUP_TOPIC ? 'bench.nowhere' : queue),
    connectionName: 'outbox-bench',
    ...options,
  });
}

/**
 * The library's own Kafka publisher, sending to `topic`; the warm-up message of
 * `connectPublisher` goes to {@link kafkaWarmupTopic} instead, so `topic` holds only the drain's.
 */
export function kafkaPublisher(topic: string): KafkaPublisher {
  return new KafkaPublisher({
    brokers: [...SERVICES.kafka.brokers],
    clientId: 'outbox-bench',
    topic: (r) => (r.topic === WARMUP_TOPIC ? kafkaWarmupTopic(topic) : topic),
  });
}

/** Where {@link kafkaPublisher}'s warm-up message goes: a topic the caller creates. */
export function kafkaWarmupTopic(topic: string): string {
  return `${topic}-warmup`;
}

/** Opens the publisher's connection before a measurement (one unroutable message; its failure is expected). */
export async function connectPublisher(publisher: OutboxPublisher): Promise<void> {
  const record = {
    id: '0',
    messageId: '00000000-0000-7000-8000-000000000000',
    topic: WARMUP_TOPIC,
    key: null,
    type: 'warmup',
    payload: '{}',
    headers: {},
    attempts: 0,
    createdAt: new Date(),
  };
  await publisher.publish([record], new AbortController().signal).catch(() => undefined);
}

/**
 * Drains until the table has nothing pending (drain() stops at the first partial batch; the loop
 * covers batches shortened by per-key heads or other dispatchers). Resolves to messages published.
 */
export async function drainAll(
  app: OutboxApp,
  ds: DataSource,
  table: string,
  timeoutMs = 600_000,
): Promise<number> {
  const dispatcher = app.dispatcher;
  if (dispatcher === undefined) throw new Error('no dispatcher');
  const deadline = Date.now() + timeoutMs;
  let published = 0;
  for (;;) {
    published += await dispatcher.drain();
    if ((await pendingCount(ds, table)) === 0) return published;
    if (Date.now() > deadline) throw new Error(`drain did not finish within ${timeoutMs} ms`);
    await sleep(1);
  }
}

/** Wall time spent in the store's claim and settle and in the publisher, per batch. */
export interface PhaseTimes {
  claimMs: number[];
  settleMs: number[];
  publishMs: number[];
}

/** Wraps the store and publisher of a running app with timers (bench instrumentation only). */
export function instrument(store: OutboxStore, publisher?: OutboxPublisher): PhaseTimes {
  const times: PhaseTimes = { claimMs: [], settleMs: [], publishMs: [] };
  const claim = store.claim.bind(store);
  const settle = store.settle.bind(store);
  if (publisher !== undefined) {
    const publish = publisher.publish.bind(publisher);
    publisher.publish = async (records, signal) => {
      const t = performance.now();
      try {
        return await publish(records, signal);
      } finally {
        times.publishMs.push(performance.now() - t);
      }
    };
  }
  store.claim = async (o) => {
    const t = performance.now();
    try {
      return await claim(o);
    } finally {
      times.claimMs.push(performance.now() - t);
    }
  };
  store.settle = async (token, s, d) => {
    const t = performance.now();
    try {
      return await settle(token, s, d);
    } finally {
      times.settleMs.push(performance.now() - t);
    }
  };
  // Partitioned delivery reads and settles through the partition store: its reads count as claims.
  const owned = store.deliveryPartitions;
  if (owned !== undefined) {
    const read = owned.readOwned.bind(owned);
    const settleOwned = owned.settleOwned.bind(owned);
    owned.readOwned = async (...args) => {
      const t = performance.now();
      try {
        return await read(...args);
      } finally {
        times.claimMs.push(performance.now() - t);
      }
    };
    owned.settleOwned = async (...args) => {
      const t = performance.now();
      try {
        return await settleOwned(...args);
      } finally {
        times.settleMs.push(performance.now() - t);
      }
    };
  }
  return times;
}

/** What a dispatcher's claims took since the counter was made (P6: claims per message). */
export interface ClaimCounts {
  claims: number;
  /** Claims that leased nothing (every candidate held by another claim, in flight, or none). */
  empty: number;
  rows: number;
}

/** Counts `store`'s claims and the rows they leased, from now on. */
export function countClaims(store: OutboxStore): ClaimCounts {
  const counts: ClaimCounts = { claims: 0, empty: 0, rows: 0 };
  const claim = store.claim.bind(store);
  store.claim = async (o) => {
    const batch = await claim(o);
    counts.claims++;
    counts.rows += batch.records.length;
    if (batch.records.length === 0) counts.empty++;
    return batch;
  };
  return counts;
}

/**
 * Runs one measurement, repeating it (up to `attempts` times) when it threw or when one of the
 * watched apps reported an outage during it: other test suites on this machine restart RabbitMQ
 * or raise its memory alarm now and then, and such a run measures them, not the outbox.
 */
export async function measured<T>(
  label: string,
  log: (line: string) => void,
  fn: () => Promise<T>,
  watch: readonly OutboxApp[] = [],
  attempts = 3,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const before = watch.reduce((a, w) => a + w.outages.count, 0);
    try {
      const value = await fn();
      const outages = watch.reduce((a, w) => a + w.outages.count, 0) - before;
      if (outages === 0 || attempt >= attempts) return value;
      log(
        `${label}: ${outages} outage(s) during the run (a service was restarted or blocked); repeating it`,
      );
    } catch (error) {
      if (attempt >= attempts) throw error;
      log(`${label}: ${error instanceof Error ? error.message : String(error)}; repeating it`);
    }
    await sleep(3_000);
  }
}
