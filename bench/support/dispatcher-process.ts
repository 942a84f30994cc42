/**
 * A dispatcher in a process of its own (P4, P6, P8 and the CPU profiles): the real OutboxModule
 * on PostgreSQL with the library's RabbitMqPublisher, or its KafkaPublisher (`kafkaTopic`).
 *
 * Modes: 'drain'  — on "go", drain until nothing is pending, report timings (and phase times);
 *        'run'    — on "go", start the dispatcher as an app does (its own loop, polls and
 *                   retries, LISTEN/NOTIFY) until "stop", then close the app and open a fresh
 *                   one for the next "go"; reports when its last batch ended;
 *        'serve'  — autoStart (LISTEN/NOTIFY or polling) until "stop";
 *        'idle'   — like serve, counting the statements TypeORM runs between "go" and "stop";
 *        'rss'    — drain, sampling the resident set size.
 *
 * With `stallable` (T1), a "stall" message makes the next publish hang mid-batch
 * (support/stalling-publisher.ts), reported as "hanging" with the batch's ids.
 */
import 'reflect-metadata';
import type { OutboxDelivery, OutboxDispatcherOptions, OutboxPublisher } from '../../lib';
import { logTailing, type LogTailingOptions } from '../../lib/log-tailing';
import { childSide } from './child';
import {
  CountingLogger,
  closeDataSource,
  openMaria,
  openPostgres,
  pendingCount,
} from './databases';
import { ReaderLines } from './log-tailing';
import { ConfirmCounting, PartitionLines } from './partition-lines';
import { StallingPublisher } from './stalling-publisher';
import {
  connectPublisher,
  countClaims,
  instrument,
  kafkaPublisher,
  rabbitPublisher,
  startOutboxApp,
  type OutboxApp,
} from './outbox-app';
import { nowMs } from './stats';
import { sleep } from '../../test/support/wait-for';

export interface DispatcherChildConfig {
  readonly mode: 'drain' | 'run' | 'serve' | 'idle' | 'rss';
  readonly table: string;
  readonly queue: string;
  /** Publish to this Kafka topic with KafkaPublisher instead of `queue` on RabbitMQ. */
  readonly kafkaTopic?: string;
  readonly instanceId: string;
  readonly dispatcher?: OutboxDispatcherOptions;
  readonly phases?: boolean;
  /** The database (L2, L3 run on MariaDB too). @default 'postgres' */
  readonly database?: 'postgres' | 'mariadb';
  /**
   * `delivery: logTailing(these)` (the options cross the process boundary as JSON);
   * the reader's starts and reconnect lines are counted and reported with each "done".
   */
  readonly logTailing?: LogTailingOptions;
  /** A "stall" message hangs the next publish mid-batch (T1's takeover after a SIGKILL). */
  readonly stallable?: boolean;
  /** Says "outage" to the parent at every outage the dispatcher reports (T1 does not count those kills). */
  readonly reportOutages?: boolean;
  /**
   * Counts what `'partitions'` ownership logs (lapses, takeovers: support/partition-lines.ts)
   * and reports it with each "done" of the 'run' mode as `partitionLines` (T3).
   */
  readonly partitionLines?: boolean;
  /**
   * Counts the statements TypeORM runs between "go" and "stop" in the 'run' mode too (as the
   * 'idle' mode does), reported with each "done" as `queries` and `texts` (P4).
   */
  readonly countStatements?: boolean;
}

async function main(): Promise<void> {
  const { config, send, next } = childSide<DispatcherChildConfig>();
  const logger =
    config.mode === 'idle' || config.countStatements === true ? new CountingLogger() : undefined;
  const ds =
    config.database === 'mariadb'
      ? await openMaria()
      : await openPostgres({ poolSize: 10, logger });
  const readerLines = config.logTailing === undefined ? undefined : new ReaderLines();
  const partitionLines = config.partitionLines === true ? new PartitionLines() : undefined;
  const appLogger = readerLines ?? partitionLines;
  const delivery: OutboxDelivery =
    config.logTailing === undefined ? 'poll' : logTailing(config.logTailing);
  const readerReport = (): Record<string, unknown> => {
    if (readerLines === undefined) return {};
    const report = { readerStarts: readerLines.starts, readerReconnects: readerLines.reconnects };
    readerLines.reset();
    return report;
  };
  const brokerPublisher = (): OutboxPublisher =>
    config.kafkaTopic === undefined
      ? rabbitPublisher(config.queue)
      : kafkaPublisher(config.kafkaTopic);
  let stalling: StallingPublisher | undefined;
  if (config.stallable === true) {
    process.on('message', (m: { type?: string }) => {
      if (m.type === 'stall') stalling?.stall();
    });
  }
  let confirms: ConfirmCounting | undefined;
  const newPublisher = (): OutboxPublisher => {
    if (config.partitionLines === true) {
      // Carried over from the publisher of the previous "go": its count was reported then.
      confirms = new ConfirmCounting(brokerPublisher());
      return confirms;
    }
    if (config.stallable !== true) return brokerPublisher();
    stalling = new StallingPublisher(brokerPublisher(), (batch) =>
      send({ type: 'hanging', ...batch }),
    );
    return stalling;
  };
  let publisher = newPublisher();
  const serving = config.mode === 'serve' || config.mode === 'idle';
  let progress = 0;
  let lastBatchAt = 0;
  const open = (): Promise<OutboxApp> =>
    startOutboxApp({
      dataSource: ds,
      tableName: config.table,
      publisher,
      instanceId: config.instanceId,
      autoStart: serving,
      ordering: { enabled: true },
      dispatcher: config.dispatcher,
      delivery,
      ...(appLogger === undefined ? {} : { logger: appLogger }),
      observer: {
        onBatch: (report) => {
          progress += report.published;
          if (report.published > 0) lastBatchAt = nowMs();
        },
        ...(config.reportOutages === true ? { onOutage: () => send({ type: 'outage' }) } : {}),
      },
    });
  let app = await open();
  let claims = countClaims(app.store);
  const dispatcher = app.dispatcher;
  if (dispatcher === undefined) throw new Error('no dispatcher');

  if (!serving) await connectPublisher(publisher);
  const phases = config.phases === true ? instrument(app.store, publisher) : undefined;
  send({ type: 'ready' });

  // Any number of go → done (drain, rss) or go → stop → done (serve, idle) cycles, then exit.
  for (;;) {
    const command = await next(['go', 'exit']);
    if (command.type === 'exit') break;
    const outagesBefore = app.outages.count;
    if (serving) {
      if (logger !== undefined) {
        logger.count = 0;
        logger.texts.clear();
      }
      const startedAt = nowMs();
      await next('stop');
      const seconds = (nowMs() - startedAt) / 1000;
      send({
        type: 'done',
        outages: app.outages.count - outagesBefore,
        queries: logger?.count ?? 0,
        seconds,
        texts: logger === undefined ? {} : Object.fromEntries(logger.texts),
        ...readerReport(),
      });
      continue;
    }
    if (config.mode === 'run') {
      progress = 0;
      lastBatchAt = 0;
      const running = app.dispatcher;
      if (running === undefined) throw new Error('no dispatcher');
      if (logger !== undefined) {
        logger.count = 0;
        logger.texts.clear();
      }
      const startedAt = nowMs();
      const cpu = process.cpuUsage();
      await running.start();
      await next('stop');
      const used = process.cpuUsage(cpu);
      const queries = logger?.count ?? 0;
      const texts = logger === undefined ? {} : Object.fromEntries(logger.texts);
      const published = progress;
      const finishedAt = lastBatchAt;
      const outages = app.outages.count - outagesBefore;
      // Closing stops the dispatcher; the next "go" starts a fresh one, so that a dispatcher
      // left running cannot join a later measurement with fewer dispatchers.
      await app.close();
      const confirmedIds = confirms?.take();
      publisher = newPublisher();
      app = await open();
      const counted = claims;
      claims = countClaims(app.store);
      await connectPublisher(publisher);
      send({
        type: 'done',
        outages,
        published,
        startedAt,
        finishedAt,
        cpuUs: used.user + used.system,
        claims: counted.claims,
        emptyClaims: counted.empty,
        claimedRows: counted.rows,
        ...(logger === undefined ? {} : { queries, texts }),
        ...readerReport(),
        ...(partitionLines === undefined ? {} : { partitionLines: partitionLines.take() }),
        ...(confirmedIds === undefined ? {} : { confirmedIds }),
      });
      continue;
    }
    progress = 0;
    if (phases !== undefined) {
      phases.claimMs.length = 0;
      phases.settleMs.length = 0;
      phases.publishMs.length = 0;
    }
    const startedAt = nowMs();
    const rss: { t: number; published: number; rssMb: number; heapMb: number }[] = [];
    const gcHeap: { at: string; heapMb: number }[] = [];
    let published = 0;
    let sampler: NodeJS.Timeout | undefined;
    const collect = (at: string): void => {
      const gc = (globalThis as { gc?: () => void }).gc;
      if (gc === undefined) return;
      gc();
      gcHeap.push({ at, heapMb: process.memoryUsage().heapUsed / 2 ** 20 });
    };
    if (config.mode === 'rss') {
      const total = Number(command.expected ?? 0);
      let collectedWarm = false;
      const sample = (): void => {
        if (!collectedWarm && total > 0 && progress >= total * 0.1) {
          collectedWarm = true;
          collect('10%');
        }
        const m = process.memoryUsage();
        rss.push({
          t: nowMs() - startedAt,
          published: progress,
          rssMb: m.rss / 2 ** 20,
          heapMb: m.heapUsed / 2 ** 20,
        });
      };
      sample();
      sampler = setInterval(sample, 250);
    }
    const cpu = process.cpuUsage();
    const hrStartUs = Number(process.hrtime.bigint() / 1000n);
    for (;;) {
      const n = await dispatcher.drain();
      published += n;
      if (n === 0 && (await pendingCount(ds, config.table)) === 0) break;
      if (n === 0) await sleep(2);
    }
    const finishedAt = nowMs();
    const hrEndUs = Number(process.hrtime.bigint() / 1000n);
    if (sampler !== undefined) {
      clearInterval(sampler);
      collect('end');
    }
    const used = process.cpuUsage(cpu);
    send({
      type: 'done',
      outages: app.outages.count - outagesBefore,
      published,
      startedAt,
      finishedAt,
      hrStartUs,
      hrEndUs,
      rss,
      gcHeap,
      phases,
      cpuMs: (used.user + used.system) / 1000,
    });
  }
  await app.close();
  await closeDataSource(ds);
  process.exit(0);
}

main().catch((error: unknown) => {
  console.error('dispatcher child failed:', error);
  process.exit(1);
});
