/**
 * P17: a large JSON payload (10 MiB) does not multiply in memory. In a process of its own (with
 * --expose-gc), the real OutboxModule enqueues `p17Messages` such messages one at a time
 * (OutboxService.enqueue in a TypeORM transaction on PostgreSQL), then drains them to RabbitMQ
 * with RabbitMqPublisher (durable queue, publisher confirms); a consumer in this process checks
 * each message arrived once, byte for byte. The process's RSS and heapUsed + external are
 * sampled every few milliseconds and at every claim, publish, settle and batch, against a
 * baseline taken after a full GC; the peak growth is divided by the payload size times the
 * messages in flight at once: copies of a payload in memory at the worst moment.
 *
 * Three dispatcher settings, each in a fresh process per run: batchSize 1 with one batch in
 * flight (one payload in flight); the same with a full GC before every claim (a diagnostic: the
 * copies one message makes, without the garbage earlier messages left for V8 to collect); and the
 * defaults (batchSize 500, 2 batches: every message at once).
 */
import { forkTs } from '../support/child';
import { named } from '../support/config';
import { dropOutboxTable, resetOutboxTable, truncateOutbox } from '../support/databases';
import type {
  EnqueuedPayload,
  LargePayloadChildConfig,
  MemoryPeak,
  MemoryPoint,
} from '../support/large-payload-process';
import { checkPayloads, purgeQueue, resetQueue } from '../support/rabbit';
import {
  addMetric,
  addTarget,
  newResult,
  type BenchContext,
  type ScenarioResult,
} from '../support/report';
import { round } from '../support/stats';

const TABLE = named('bench_p17');
const QUEUE = named('bench.p17', '.');
const MB = 2 ** 20;
/** How often the child samples its memory between the claim/publish/settle hooks. */
const SAMPLE_MS = 5;

/**
 * Copies of a payload the drain cannot do without, per message in flight: the driver's receive
 * buffer (a row arrives whole before it becomes a string), the text the driver returns (a
 * string), the bytes amqplib takes (a Buffer) and amqplib's frames (it copies the body into
 * frames of frameMax, 128 KiB). Anything above is a copy the path could avoid, or garbage not
 * collected yet.
 */
const DRAIN_COPIES_TARGET = 4;
/**
 * On enqueue, beside the caller's own object: its JSON text, the driver's Bind message that
 * carries it to the server, and one payload of slack for garbage not collected yet.
 */
const ENQUEUE_COPIES_TARGET = 3;

interface Setting {
  readonly name: 'one' | 'one_gc' | 'defaults';
  readonly label: string;
  readonly dispatcher: LargePayloadChildConfig['dispatcher'];
  readonly gcBeforeClaim?: boolean;
  readonly inFlight: (n: number) => number;
}

const SETTINGS: readonly Setting[] = [
  {
    name: 'one',
    label: 'batchSize 1, 1 batch in flight',
    dispatcher: { batchSize: 1, batchesInFlight: 1 },
    inFlight: (n) => Math.min(n, 1),
  },
  {
    // Diagnostic: the copies one message makes, without the garbage of the ones before it.
    name: 'one_gc',
    label: 'batchSize 1, 1 batch in flight, full GC before each claim',
    dispatcher: { batchSize: 1, batchesInFlight: 1 },
    gcBeforeClaim: true,
    inFlight: (n) => Math.min(n, 1),
  },
  {
    name: 'defaults',
    label: 'defaults (batchSize 500, 2 batches)',
    dispatcher: {},
    inFlight: (n) => Math.min(n, 500 * 2),
  },
];

interface DrainRun {
  copiesRss: number;
  copiesHeapExternal: number;
  peakRssGrowthMb: number;
  retainedMb: number;
  msgsPerS: number;
}

export async function p17(ctx: BenchContext): Promise<ScenarioResult> {
  const { profile, pg, rabbit, log } = ctx;
  const n = profile.p17Messages;
  const bytes = profile.p17PayloadBytes;
  const result = newResult(
    'P17',
    `Large payloads: ${n} × ${round(bytes / MB, 1)} MiB JSON, enqueued on PostgreSQL and drained to RabbitMQ; peak memory growth per payload in flight`,
  );
  await resetOutboxTable(pg, TABLE);
  await resetQueue(rabbit, QUEUE);
  const enqueueRss: number[] = [];
  const enqueueHeap: number[] = [];
  const drains: Record<Setting['name'], DrainRun[]> = { one: [], one_gc: [], defaults: [] };
  let problems = 0;
  try {
    for (let run = 1; run <= ctx.runs; run++) {
      for (const setting of SETTINGS) {
        await truncateOutbox(pg, TABLE);
        await purgeQueue(rabbit, QUEUE);
        const child = forkTs(
          '../support/large-payload-process.ts',
          {
            table: TABLE,
            queue: QUEUE,
            topic: 'bench.large',
            instanceId: `bench-p17-${setting.name}`,
            payloadBytes: bytes,
            dispatcher: setting.dispatcher,
            gcBeforeClaim: setting.gcBeforeClaim,
            sampleMs: SAMPLE_MS,
          } satisfies LargePayloadChildConfig,
          ['--expose-gc'],
        );
        try {
          await child.next('ready', 60_000);
          child.send({ type: 'enqueue', count: n });
          const enqueued = await child.next('enqueued', 300_000);
          const payloads = enqueued.payloads as EnqueuedPayload[];
          const peaks = enqueued.peaks as MemoryPeak[];
          // The worst enqueue of this process: each one holds a single payload.
          const enqueueCopies = peaks.map((p) => ({
            rss: (p.peakRss - p.baseline.rss) / bytes,
            heap: (p.peakHeapExternal - heapExternal(p.baseline)) / bytes,
          }));
          enqueueRss.push(Math.max(...enqueueCopies.map((c) => c.rss)));
          enqueueHeap.push(Math.max(...enqueueCopies.map((c) => c.heap)));

          const consumer = await checkPayloads(QUEUE, payloads);
          child.send({ type: 'go' });
          const done = await child.next('done', 600_000);
          const check = await consumer.done();
          const peak = done.peak as MemoryPeak;
          const after = done.afterGc as MemoryPoint;
          const inFlight = setting.inFlight(n);
          const drain: DrainRun = {
            copiesRss: (peak.peakRss - peak.baseline.rss) / (bytes * inFlight),
            copiesHeapExternal:
              (peak.peakHeapExternal - heapExternal(peak.baseline)) / (bytes * inFlight),
            peakRssGrowthMb: (peak.peakRss - peak.baseline.rss) / MB,
            retainedMb: (heapExternal(after) - heapExternal(peak.baseline)) / MB,
            msgsPerS: Number(done.published) / Number(done.seconds),
          };
          drains[setting.name].push(drain);
          const runProblems = check.duplicates + check.missing + check.mismatched;
          problems += runProblems;
          if (Number(done.published) !== n || Number(done.outages) > 0) problems++;
          log(
            `P17 run ${run}, ${setting.label}: enqueue peak ${fmt(enqueueRss.at(-1))} × payload (RSS), ${fmt(enqueueHeap.at(-1))} × (heap+external); drain of ${Number(done.published)} in ${Number(done.seconds).toFixed(2)} s, ${inFlight} in flight: peak RSS +${drain.peakRssGrowthMb.toFixed(0)} MB = ${fmt(drain.copiesRss)} × payload per message in flight, heap+external ${fmt(drain.copiesHeapExternal)} ×, ${peak.samples} samples; retained after GC ${drain.retainedMb.toFixed(1)} MB; consumer: ${check.received} received, ${check.duplicates} duplicates, ${check.missing} missing, ${check.mismatched} not byte-exact${Number(done.outages) > 0 ? `; ${String(done.outages)} outage(s)` : ''}`,
          );
        } finally {
          child.send({ type: 'exit' });
          await child.exit();
        }
      }
    }
  } finally {
    await dropOutboxTable(pg, TABLE);
    await rabbit.deleteQueue(QUEUE);
  }

  const enqueue = addMetric(
    result,
    'enqueue_peak_rss_per_payload',
    'enqueue: peak RSS growth ÷ payload, worst per process',
    '×',
    enqueueRss,
    n,
  );
  addMetric(
    result,
    'enqueue_peak_heap_external_per_payload',
    'enqueue: peak heap+ext growth ÷ payload, worst/process',
    '×',
    enqueueHeap,
    n,
  );
  const medians: Partial<Record<Setting['name'], number>> = {};
  for (const setting of SETTINGS) {
    const runs = drains[setting.name];
    const inFlight = setting.inFlight(n);
    const rss = addMetric(
      result,
      `drain_${setting.name}_peak_rss_per_payload`,
      `drain, ${setting.name}: peak RSS growth ÷ (payload × ${inFlight})`,
      '×',
      runs.map((r) => r.copiesRss),
      n,
    );
    addMetric(
      result,
      `drain_${setting.name}_peak_heap_external_per_payload`,
      `drain, ${setting.name}: peak heap+ext growth ÷ (payload × ${inFlight})`,
      '×',
      runs.map((r) => r.copiesHeapExternal),
      n,
    );
    addMetric(
      result,
      `drain_${setting.name}_peak_rss_growth_mb`,
      `drain, ${setting.name}: peak RSS growth`,
      'MB',
      runs.map((r) => r.peakRssGrowthMb),
    );
    addMetric(
      result,
      `drain_${setting.name}_retained_after_gc_mb`,
      `drain, ${setting.name}: heap+ext after GC − baseline`,
      'MB',
      runs.map((r) => r.retainedMb),
    );
    addMetric(
      result,
      `drain_${setting.name}_msgs_per_s`,
      `drain, ${setting.name} (${inFlight} in flight): rate`,
      'msgs/s',
      runs.map((r) => r.msgsPerS),
      n,
    );
    medians[setting.name] = rss.median;
  }
  // Targets on RSS (what the machine gives the process); heap+external is reported beside it.
  addTarget(
    result,
    'p17_peak_growth_per_payload',
    'drain, one in flight: peak RSS growth ÷ payload',
    medians.one ?? Number.NaN,
    '<=',
    DRAIN_COPIES_TARGET,
  );
  addTarget(
    result,
    'p17_batch_peak_growth_per_payload',
    'drain, one in flight, GC before each claim: peak RSS growth ÷ payload',
    medians.one_gc ?? Number.NaN,
    '<=',
    DRAIN_COPIES_TARGET,
  );
  addTarget(
    result,
    'p17_defaults_peak_growth_per_payload',
    `drain, defaults (${SETTINGS[2]?.inFlight(n)} in flight): peak RSS growth ÷ (payload × in flight)`,
    medians.defaults ?? Number.NaN,
    '<=',
    DRAIN_COPIES_TARGET,
  );
  addTarget(
    result,
    'p17_enqueue_peak_growth_per_payload',
    `enqueue of one: peak RSS growth ÷ payload (worst of ${n} in each process)`,
    enqueue.median,
    '<=',
    ENQUEUE_COPIES_TARGET,
  );
  addTarget(
    result,
    'p17_delivery_problems',
    'duplicates + missing + not byte-exact',
    problems,
    '==',
    0,
  );
  result.values.p17_payload_bytes = bytes;
  result.notes.push(
    `Growth is over a baseline taken in the measured process after a full GC; samples every ${SAMPLE_MS} ms and at every claim, publish, settle and batch. Both figures count garbage V8 has not collected yet (a 10 MiB string lives in its large-object space until a full GC). RSS also moves with the allocator: memory freed earlier and reused does not show as growth, so RSS can read below heap+external. The payload is ASCII JSON (random hex), one byte per character as a V8 string and in UTF-8; a payload with a character beyond Latin-1 takes two bytes per character as a V8 string.`,
  );
  return result;
}

function heapExternal(m: MemoryPoint): number {
  return m.heapUsed + m.external;
}

function fmt(value: number | undefined): string {
  return value === undefined || !Number.isFinite(value) ? 'n/a' : value.toFixed(2);
}
