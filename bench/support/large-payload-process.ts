/**
 * P17's child process (run with --expose-gc): the real OutboxModule on PostgreSQL with the
 * library's RabbitMqPublisher, enqueueing messages with a large JSON payload and draining them,
 * while its own memory is sampled.
 *
 * On "enqueue" { count }: for each message, builds its payload (about `payloadBytes` of JSON),
 * takes a baseline after a full GC, enqueues it in a TypeORM transaction while sampling memory
 * every `sampleMs`, and reports the peak growth and the message's id, length and SHA-256 (for the
 * consumer's byte-exact check). On "go": takes a baseline after a full GC, drains, sampling every
 * `sampleMs` and at every claim, publish, settle and batch report, and reports the peaks.
 */
import 'reflect-metadata';
import { createHash, randomBytes } from 'node:crypto';
import type { OutboxDispatcherOptions } from '../../lib';
import { childSide } from './child';
import { closeDataSource, openPostgres, pendingCount } from './databases';
import { connectPublisher, rabbitPublisher, startOutboxApp } from './outbox-app';
import { sleep } from '../../test/support/wait-for';

export interface LargePayloadChildConfig {
  readonly table: string;
  readonly queue: string;
  readonly topic: string;
  readonly instanceId: string;
  /** Length of each payload's JSON text (ASCII, so also its UTF-8 bytes). */
  readonly payloadBytes: number;
  readonly dispatcher: OutboxDispatcherOptions;
  /**
   * A full GC before every claim: the peak then holds one batch's copies, not also the garbage
   * of earlier batches that V8 has not collected yet (a diagnostic setting).
   */
  readonly gcBeforeClaim?: boolean;
  readonly sampleMs: number;
}

/** A payload's JSON as the consumer must receive it. */
export interface EnqueuedPayload {
  readonly messageId: string;
  readonly bytes: number;
  readonly sha256: string;
}

/** Memory of this process, in bytes. */
export interface MemoryPoint {
  readonly rss: number;
  readonly heapUsed: number;
  /** C++ objects and ArrayBuffers (Buffers) outside the V8 heap; `arrayBuffers` included. */
  readonly external: number;
  readonly arrayBuffers: number;
}

/** Growth of the peak over a baseline taken after a full GC. */
export interface MemoryPeak {
  readonly baseline: MemoryPoint;
  /** Highest RSS seen. */
  readonly peakRss: number;
  /** Highest heapUsed + external seen (in one sample, not the sum of two maxima). */
  readonly peakHeapExternal: number;
  readonly samples: number;
}

const gc = (): void => {
  const collect = (globalThis as { gc?: () => void }).gc;
  if (collect === undefined) throw new Error('run the large-payload child with --expose-gc');
  collect();
};

function point(): MemoryPoint {
  const { rss, heapUsed, external, arrayBuffers } = process.memoryUsage();
  return { rss, heapUsed, external, arrayBuffers };
}

/** Samples memory on a timer and whenever `sample()` is called, keeping the peaks. */
class PeakSampler {
  private peakRss = 0;
  private peakHeapExternal = 0;
  private samples = 0;
  private timer: NodeJS.Timeout | undefined;
  private baseline: MemoryPoint | undefined;

  /**
   * Full GC, baseline, then sampling every `everyMs` until `stop()`. The pause between the GCs
   * lets V8 and the allocator hand freed pages back, so that the baseline RSS is not taken
   * above what it settles at.
   */
  async start(everyMs: number): Promise<void> {
    gc();
    await sleep(250);
    gc();
    this.baseline = point();
    this.peakRss = this.baseline.rss;
    this.peakHeapExternal = this.baseline.heapUsed + this.baseline.external;
    this.samples = 0;
    this.timer = setInterval(() => this.sample(), everyMs);
  }

  sample(): void {
    if (this.baseline === undefined) return;
    const m = point();
    this.samples++;
    this.peakRss = Math.max(this.peakRss, m.rss);
    this.peakHeapExternal = Math.max(this.peakHeapExternal, m.heapUsed + m.external);
  }

  stop(): MemoryPeak {
    this.sample();
    clearInterval(this.timer);
    const baseline = this.baseline;
    if (baseline === undefined) throw new Error('sampler not started');
    this.baseline = undefined;
    return {
      baseline,
      peakRss: this.peakRss,
      peakHeapExternal: this.peakHeapExternal,
      samples: this.samples,
    };
  }
}

/**
 * A payload of `bytes` JSON characters: a sequence number and random hex (so that neither the
 * database's TOAST compression nor the comparison at the consumer is helped by repetition).
 */
function largePayload(seq: number, bytes: number): { seq: number; data: string } {
  const overhead = JSON.stringify({ seq, data: '' }).length;
  const hex = Math.max(0, bytes - overhead);
  const data = randomBytes(Math.ceil(hex / 2))
    .toString('hex')
    .slice(0, hex);
  return { seq, data };
}

async function main(): Promise<void> {
  const { config, send, next } = childSide<LargePayloadChildConfig>();
  const ds = await openPostgres({ poolSize: 4 });
  const publisher = rabbitPublisher(config.queue);
  const sampler = new PeakSampler();
  const app = await startOutboxApp({
    dataSource: ds,
    tableName: config.table,
    publisher,
    instanceId: config.instanceId,
    autoStart: false,
    ordering: { enabled: true },
    // The default (256 KiB) refuses these payloads; the limit is the user's to raise.
    maxPayloadBytes: 2 * config.payloadBytes,
    dispatcher: config.dispatcher,
    observer: { onBatch: () => sampler.sample() },
  });
  const dispatcher = app.dispatcher;
  if (dispatcher === undefined) throw new Error('no dispatcher');
  await connectPublisher(publisher);

  // Samples at the points where a batch's payloads are known to be alive.
  const store = app.store;
  const claim = store.claim.bind(store);
  store.claim = async (o) => {
    if (config.gcBeforeClaim === true) gc();
    const claimed = await claim(o);
    sampler.sample();
    return claimed;
  };
  const settle = store.settle.bind(store);
  store.settle = async (token, s, d) => {
    sampler.sample();
    return settle(token, s, d);
  };
  const publish = publisher.publish.bind(publisher);
  publisher.publish = async (records, signal) => {
    sampler.sample();
    const outcomes = await publish(records, signal);
    sampler.sample();
    return outcomes;
  };
  send({ type: 'ready' });

  let seq = 0;
  for (;;) {
    const command = await next(['enqueue', 'go', 'exit']);
    if (command.type === 'exit') break;
    if (command.type === 'enqueue') {
      const payloads: EnqueuedPayload[] = [];
      const peaks: MemoryPeak[] = [];
      for (let i = 0; i < Number(command.count); i++) {
        seq++;
        let payload: { seq: number; data: string } | undefined = largePayload(
          seq,
          config.payloadBytes,
        );
        // The text the consumer must receive, hashed before the baseline and let go.
        let json: string | undefined = JSON.stringify(payload);
        const bytes = Buffer.byteLength(json);
        const sha256 = createHash('sha256').update(json).digest('hex');
        json = undefined;
        await sampler.start(config.sampleMs);
        const messageId = await ds.transaction((manager) =>
          app.outbox.enqueue(
            { topic: config.topic, key: `k${seq}`, payload: payload as object },
            manager,
          ),
        );
        peaks.push(sampler.stop());
        payload = undefined;
        payloads.push({ messageId, bytes, sha256 });
      }
      send({ type: 'enqueued', payloads, peaks });
      continue;
    }
    const outagesBefore = app.outages.count;
    await sampler.start(config.sampleMs);
    const started = performance.now();
    let published = 0;
    for (;;) {
      const n = await dispatcher.drain();
      published += n;
      if (n === 0 && (await pendingCount(ds, config.table)) === 0) break;
      if (n === 0) await sleep(2);
    }
    const seconds = (performance.now() - started) / 1000;
    const peak = sampler.stop();
    gc();
    gc();
    send({
      type: 'done',
      published,
      seconds,
      peak,
      afterGc: point(),
      outages: app.outages.count - outagesBefore,
    });
  }
  await app.close();
  await closeDataSource(ds);
  process.exit(0);
}

main().catch((error: unknown) => {
  console.error('large-payload child failed:', error);
  process.exit(1);
});
