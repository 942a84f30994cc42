import type { OutboxMessage, OutboxRecord, PublishOutcome } from '../../lib';
import { RecordingPublisher } from '../../lib/testing';
import type { ClaimOptions } from '../../lib/store/ports/outbox-store.port';
import { CapturingLogger as CapturedLogs } from '../support/capturing-logger';
import { testDatabase } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';

// What an operator sees while the dispatcher works: its lifecycle, once per event, never a line
// per message.

class CapturingLogger extends CapturedLogs {
  /** The texts of the dispatcher's lines matching `pattern`. */
  of(pattern: RegExp, level?: string): string[] {
    return this.linesOf(pattern, level).map((l) => l.message);
  }
}

const sqlite = testDatabase('sqlite');

/** Blocks this process's event loop for real, as SIGSTOP or a long GC pause would. */
const freezeProcess = (ms: number): void => {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
};

/** Lines blaming the broker or the database. */
const BLAME = /Outage begun|got no database answer|is a connection or lock stuck/;

describe('dispatcher lifecycle logs', () => {
  const scope = useOutboxScope(sqlite, { tablePrefix: 'outbox_logs' });

  it('says at the start, before any message, when the publisher cannot reach its broker, and nothing when it can', async () => {
    class Pinged extends RecordingPublisher {
      pings = 0;
      override ping(): Promise<void> {
        this.pings += 1;
        return super.ping();
      }
    }
    const open = async (publisher: Pinged, logger: CapturingLogger) =>
      scope.open({
        publisher,
        logger,
        options: { autoStart: true, dispatcher: { pollIntervalMs: 60_000 } },
      });

    const downLogger = new CapturingLogger();
    const down = new Pinged().goDown(new Error('connect ECONNREFUSED 127.0.0.1:5673'));
    const h = await open(down, downLogger);
    await waitFor('the startup warning', () => downLogger.of(/at startup/, 'warn').length > 0);
    expect(downLogger.of(/at startup/, 'warn')).toEqual([
      expect.stringMatching(
        /^The publisher cannot reach its broker at startup \(run [0-9a-f]{8}\): .*ECONNREFUSED 127\.0\.0\.1:5673; messages wait in the outbox/,
      ),
    ]);
    expect(down.pings).toBe(1);
    expect(down.calls).toEqual([]); // said before any publish
    await h.close();

    const upLogger = new CapturingLogger();
    const up = new Pinged();
    const u = await open(up, upLogger);
    await waitFor('the startup ping', () => up.pings === 1);
    await u.close();
    expect(upLogger.of(/at startup/)).toEqual([]);
  });

  it('logs start, one outage begun and over, and stop, with a run id; no line per message', async () => {
    const logger = new CapturingLogger();
    const publisher = new RecordingPublisher().goDown();
    const h = await scope.open({
      publisher,
      logger,
      options: { autoStart: true, dispatcher: { pollIntervalMs: 50, maxOutagePauseMs: 200 } },
    });
    const messages: OutboxMessage[] = Array.from({ length: 50 }, (_, i) => ({
      topic: 'orders',
      key: `k${i}`,
      payload: { i },
    }));
    await h.enqueue(messages);
    // Several pauses of the outage go by (50, 100, 200, 200 … ms).
    await waitFor('three publish calls during the outage', () => publisher.calls.length >= 3);
    publisher.comeBack();
    await publisher.until((p) => p.messages.length === 50, 10_000, 'every message');
    await h.close();

    const started = logger.of(/^Dispatcher started \(run [0-9a-f]{8}\)/, 'log');
    expect(started).toHaveLength(1);
    const run = /run ([0-9a-f]{8})/.exec(started[0] ?? '')?.[1];
    expect(started[0]).toMatch(/batchSize \d+, batchesInFlight \d+, leaseMs \d+/);
    // Which source runs, with its own settings only.
    expect(started[0]).toMatch(/: polling every 50 ms \(no LISTEN\), batchSize/);
    expect(started[0]).not.toMatch(/log tailing|sweep/);
    expect(logger.of(/^Outage begun/, 'warn')).toHaveLength(1);
    expect(logger.of(/^Outage over after \d+ ms/, 'log')).toHaveLength(1);
    expect(logger.of(new RegExp(`^Dispatcher stopped \\(run ${run}\\)`), 'log')).toHaveLength(1);
    // Lifecycle only: far fewer lines than messages at log level and above.
    const loud = logger.lines.filter(
      (l) => l.context === 'OutboxDispatcher' && l.level !== 'debug' && l.level !== 'verbose',
    );
    expect(loud.length).toBeLessThan(10);
  });

  it("with delivery 'external', says once that no dispatcher runs and logs no stop", async () => {
    const logger = new CapturingLogger();
    const h = await scope.open({
      logger,
      options: { delivery: 'external', autoStart: true, workers: true },
    });
    await h.close();

    expect(logger.of(/delivery is external.*no dispatcher runs/, 'log')).toHaveLength(1);
    expect(logger.of(/^Dispatcher (started|stopped)/)).toEqual([]);
  });

  it('says a pause of this process past the publish deadline is its own, not a broker outage', async () => {
    class Freezing extends RecordingPublisher {
      freezeMs = 0;
      override async publish(
        records: readonly OutboxRecord[],
        signal: AbortSignal,
      ): Promise<PublishOutcome[]> {
        const ms = this.freezeMs;
        this.freezeMs = 0;
        if (ms > 0) {
          freezeProcess(ms);
          // The broker's answer comes in over the network, after the timers due meanwhile.
          await sleep(0);
        }
        return super.publish(records, signal);
      }
    }
    const logger = new CapturingLogger();
    const publisher = new Freezing();
    const h = await scope.open({
      publisher,
      logger,
      options: { dispatcher: { leaseMs: 10_000, publishTimeoutMs: 500 } },
    });
    const [id] = await h.enqueue([{ topic: 'orders', key: 'k', payload: {} }]);
    publisher.freezeMs = 2_000;
    await h.dispatcher.runOnce();

    expect(logger.of(BLAME)).toEqual([]);
    expect(logger.of(/^This process was paused for at least \d+ ms/, 'warn')).toHaveLength(1);
    expect(h.dispatcher.status().pausedUntil).toBeNull();
    // The broker had it: delivered, once.
    expect(publisher.messageIds).toEqual([id]);
    expect((await h.row(id ?? '')).status).toBe('delivered');
  });
});

describeWith(['postgres'], 'dispatcher lifecycle logs (postgres)', () => {
  const scope = useOutboxScope(testDatabase('postgres'), { tablePrefix: 'outbox_logs' });

  it('says a pause of this process during a claim is its own, not a stuck database', async () => {
    const logger = new CapturingLogger();
    const publisher = new RecordingPublisher();
    const h = await scope.open({
      publisher,
      logger,
      // The claim loop's pause: its claim is the statement frozen here.
      options: { dispatcher: { claims: 'leases', leaseMs: 10_000, dbTimeoutMs: 300 } },
    });
    const [id] = await h.enqueue([{ topic: 'orders', key: 'k', payload: {} }]);
    const realClaim = h.store.claim.bind(h.store);
    let freeze = true;
    h.store.claim = (options: ClaimOptions) => {
      const claiming = realClaim(options);
      // Once the claim is on its way and its watchdog armed: the database answers during the
      // pause, and on waking the watchdog's timer fires before that answer is read.
      if (freeze) setImmediate(() => freezeProcess(2_000));
      freeze = false;
      return claiming;
    };
    await h.dispatcher.runOnce();
    // The pause may have cost the claim its transaction (the server ends one left idle past
    // dbTimeoutMs); then the next claim takes the message, with no outage paused for.
    expect(h.dispatcher.status()).toMatchObject({ pausedUntil: null, stalledDatabaseCall: null });
    await waitFor('the message published', async () => {
      if (publisher.messageIds.length === 0) await h.dispatcher.runOnce();
      return publisher.messageIds.length > 0;
    });

    expect(logger.lines.filter((l) => BLAME.test(l.message))).toEqual([]);
    expect(
      logger.of(/^This process was paused for at least \d+ ms/, 'warn').length,
    ).toBeGreaterThan(0);
    expect(publisher.messageIds).toEqual([id]);
    expect((await h.row(id ?? '')).status).toBe('delivered');
  });
});

describe('dispatcher per-message logs', () => {
  const scope = useOutboxScope(sqlite, { tablePrefix: 'outbox_msglogs' });

  it('says why an attempt failed, at warn once per topic per interval, with the message facts and the run id as fields; the batch line at verbose', async () => {
    const logger = new CapturingLogger();
    const publisher = new RecordingPublisher()
      .fail({ topic: 'payments' }, 'retryable', { error: new TypeError('handler blew up') })
      .fail({ topic: 'orders' }, 'retryable', { error: new Error('broker said 503') });
    const h = await scope.open({ publisher, logger });
    const [p1, p2, p3] = await h.enqueue(
      ['p1', 'p2', 'p3'].map((key) => ({
        topic: 'payments',
        key,
        type: 'PaymentTaken',
        payload: {},
      })),
    );
    const [o1] = await h.enqueue([{ topic: 'orders', payload: {} }]);
    await h.dispatcher.runOnce();

    // Every message was tried and failed once: retried, not lost.
    for (const id of [p1, p2, p3, o1]) {
      expect(await h.row(id ?? '')).toMatchObject({ status: 'pending', attempts: 1 });
    }
    const loud = logger.linesOf(/failed attempt 1, retrying in \d+ ms/, 'warn');
    expect(loud).toHaveLength(2);
    const payment = loud.find((l) => l.message.includes('to payments'));
    expect(payment?.message).toMatch(
      /^Message \S+ \(PaymentTaken to payments\) failed attempt 1, retrying in \d+ ms: TypeError: handler blew up \(batch [0-9a-f]{8}, run [0-9a-f]{8}\)$/,
    );
    expect(loud.find((l) => l.message.includes('to orders'))?.message).toMatch(
      /failed attempt 1, retrying in \d+ ms: Error: broker said 503/,
    );
    const runId = /run ([0-9a-f]{8})/.exec(payment?.message ?? '')?.[1];
    const batchId = /batch ([0-9a-f]{8})/.exec(payment?.message ?? '')?.[1];
    const paymentIds = [p1, p2, p3];
    expect(paymentIds).toContain(payment?.fields?.['messageId']);
    expect(payment?.fields).toEqual({
      runId,
      batch: batchId,
      messageId: expect.any(String),
      key: expect.stringMatching(/^p[123]$/),
      topic: 'payments',
      type: 'PaymentTaken',
      attempt: 1,
      errorClass: 'TypeError',
      err: { type: 'TypeError', message: 'TypeError: handler blew up' },
      retryInMs: expect.any(Number),
    });
    expect(loud.find((l) => l.message.includes('orders'))?.fields).not.toHaveProperty('key');
    // The topic's other failures in the interval are quieter, not gone.
    expect(logger.linesOf(/to payments\) failed attempt 1/, 'verbose')).toHaveLength(2);
    // The batch line: verbose, not debug, naming the run, its counts as fields.
    expect(logger.linesOf(/^Batch:/, 'debug')).toEqual([]);
    const batch = logger.linesOf(/^Batch: claimed 4, published 0, retried 4/, 'verbose');
    expect(batch.map((l) => l.message)).toEqual([
      expect.stringMatching(`\\(batch ${batchId}, run ${runId}\\)$`),
    ]);
    expect(batch[0]?.fields).toMatchObject({
      runId,
      batch: batchId,
      claimed: 4,
      retried: 4,
      published: 0,
    });
    // The claim that began it, at debug, under the same batch id: one batch, start to settle.
    const claimed = logger.linesOf(/^Claimed 4 message\(s\) by the claim loop/, 'debug');
    expect(claimed.map((l) => l.message)).toEqual([
      expect.stringMatching(`\\(batch ${batchId}, run ${runId}\\)$`),
    ]);
    await h.close();
  });

  it('gives a dead letter its facts as fields', async () => {
    const logger = new CapturingLogger();
    const publisher = new RecordingPublisher().fail({ topic: 'orders' }, 'permanent');
    const h = await scope.open({ publisher, logger });
    const [id] = await h.enqueue([
      { topic: 'orders', key: 'o-1', type: 'OrderPlaced', payload: {} },
    ]);
    await h.dispatcher.runOnce();

    expect((await h.row(id ?? '')).status).toBe('dead');
    const dead = logger.linesOf(/dead-lettered after 1 attempt/, 'warn');
    expect(dead).toHaveLength(1);
    expect(dead[0]?.fields).toEqual({
      runId: expect.stringMatching(/^[0-9a-f]{8}$/),
      batch: expect.stringMatching(/^[0-9a-f]{8}$/),
      messageId: id,
      key: 'o-1',
      topic: 'orders',
      type: 'OrderPlaced',
      attempt: 1,
      errorClass: 'PermanentPublishError',
      err: { type: 'PermanentPublishError', message: expect.any(String) },
    });
    await h.close();
  });
});
