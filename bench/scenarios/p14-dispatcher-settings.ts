/**
 * P14: which dispatcher settings drain fastest, to choose the defaults from a measurement. The
 * P1 drain (PostgreSQL → RabbitMQ, ordering on, 1 000 keys) with the defaults and with larger
 * batches and more batches in flight, the settings interleaved run by run, every run checked at
 * the consumer. Runs only when named (`--only P14`).
 */
import type { OutboxDispatcherOptions } from '../../lib';
import { named } from '../support/config';
import { checkedRabbitDrain } from '../support/checked-drain';
import {
  dropOutboxTable,
  resetOutboxTable,
  seedOutbox,
  truncateOutbox,
} from '../support/databases';
import { drainAll, rabbitPublisher, startOutboxApp, type OutboxApp } from '../support/outbox-app';
import { resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { ratio, round } from '../support/stats';

const TABLE = named('bench_p14');
const QUEUE = named('bench.p14', '.');

type Settings = Required<Pick<OutboxDispatcherOptions, 'batchSize' | 'batchesInFlight'>>;

/** The defaults first: every other setting is reported against them. */
const SETTINGS: readonly Settings[] = [
  { batchSize: 500, batchesInFlight: 2 },
  { batchSize: 200, batchesInFlight: 2 },
  { batchSize: 500, batchesInFlight: 3 },
  { batchSize: 1_000, batchesInFlight: 2 },
];

const nameOf = (s: Settings): string => `b${s.batchSize}_f${s.batchesInFlight}`;

export async function p14(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg, rabbit } = ctx;
  const n = profile.p1Messages;
  const result = newResult(
    'P14',
    `Dispatcher settings: drain ${n.toLocaleString('en-US')} msgs PostgreSQL → RabbitMQ with each batch size and batches in flight`,
  );
  await resetOutboxTable(pg, TABLE);
  await resetQueue(rabbit, QUEUE);
  const apps: OutboxApp[] = [];
  const rates: number[][] = SETTINGS.map(() => []);
  let problems = 0;
  try {
    for (const [i, dispatcher] of SETTINGS.entries()) {
      apps.push(
        await startOutboxApp({
          dataSource: pg,
          tableName: TABLE,
          publisher: rabbitPublisher(QUEUE),
          autoStart: false,
          instanceId: `bench-p14-${i}`,
          ordering: { enabled: true },
          dispatcher,
        }),
      );
    }
    // Warm-up of each (connections, plans); not measured.
    for (const app of apps) {
      await truncateOutbox(pg, TABLE);
      await seedOutbox(pg, TABLE, 2_000);
      await drainAll(app, pg, TABLE);
    }
    for (let run = 1; run <= ctx.runs; run++) {
      for (const [i, app] of apps.entries()) {
        const settings = SETTINGS[i];
        if (settings === undefined) continue;
        const drained = await checkedRabbitDrain({
          label: `P14 run ${run} ${nameOf(settings)}`,
          log: ctx.log,
          app,
          ds: pg,
          table: TABLE,
          rabbit,
          queue: QUEUE,
          n,
        });
        const rate = drained.msgsPerS;
        problems += drained.problems;
        rates[i]?.push(rate);
        ctx.log(
          `P14 run ${run}: batchSize ${settings.batchSize}, batchesInFlight ${settings.batchesInFlight}: ${Math.round(rate)} msgs/s`,
        );
      }
    }
  } finally {
    for (const app of apps) await app.close();
    await dropOutboxTable(pg, TABLE);
    await rabbit.deleteQueue(QUEUE);
  }
  const medians = SETTINGS.map((settings, i) =>
    addMetric(
      result,
      `${nameOf(settings)}_msgs_per_s`,
      `batchSize ${settings.batchSize}, batchesInFlight ${settings.batchesInFlight}${i === 0 ? ' (the defaults)' : ''}`,
      'msgs/s',
      rates[i] ?? [],
      n,
    ),
  );
  const [defaults] = medians;
  if (defaults !== undefined) {
    for (const [i, settings] of SETTINGS.entries()) {
      if (i === 0) continue;
      result.values[`p14_${nameOf(settings)}_vs_defaults`] = round(
        ratio(medians[i]?.median ?? Number.NaN, defaults.median),
        3,
      );
    }
  }
  addTarget(
    result,
    'p14_delivery_problems',
    'duplicates + order violations + missing messages at the consumer, every setting',
    problems,
    '<=',
    0,
  );
  return result;
}
