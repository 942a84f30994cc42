import { CompressionTypes } from 'kafkajs';
import {
  OutboxOptionsError,
  PermanentPublishError,
  PublisherUnavailableError,
  PublishTimeoutError,
  type OutboxRecord,
  type PublishOutcome,
} from '../../lib';
import { errorChain } from '../../lib/publishers/kit/error-chain';
import {
  ABORT_CONFIRM_GRACE_MS,
  cancelledAfterGrace,
} from '../../lib/publishers/kit/publish-abort';
import { publishRound, type PublishOutcomes } from '../../lib/publishers/kit/publish-round';
import { setPublishDeadline } from '../../lib/publishers/publish-deadline';
import { resolveKafkaPublisherOptions } from '../../lib/publishers/kafka';
import { resolveRabbitMqPublisherOptions } from '../../lib/publishers/rabbitmq';
import { resolveRedisStreamsPublisherOptions } from '../../lib/publishers/redis-streams';

// The publisher kit (lib/publishers/kit) on its own: what every broker's publisher gets from it.

const record = (n: number, topic = 'orders'): OutboxRecord => ({
  id: String(n),
  messageId: `m-${n}`,
  topic,
  key: null,
  type: 'order.created',
  payload: '{}',
  headers: {},
  attempts: 0,
  createdAt: new Date(),
});

/** A broker that takes every message it is sent, in a list of what reached it. */
function broker() {
  const received: string[] = [];
  return {
    received,
    send: (items: readonly { index: number; id: string }[], outcomes: PublishOutcomes) => {
      for (const item of items) {
        received.push(item.id);
        outcomes[item.index] = { ok: true };
      }
      return Promise.resolve();
    },
  };
}

describe('publishRound', () => {
  it('fails alone a record whose route throws or that can never be sent, and sends the rest', async () => {
    const { received, send } = broker();
    const outcomes = await publishRound(
      [record(1), record(2, 'bad'), record(3, 'throws')],
      new AbortController().signal,
      {
        item: (r, index): { index: number; id: string } | PublishOutcome => {
          if (r.topic === 'throws') throw new Error('route failed');
          if (r.topic === 'bad') return { ok: false, error: new PermanentPublishError('bad') };
          return { index, id: r.messageId };
        },
        send,
        unanswered: () => new Error('unanswered'),
      },
    );
    expect(received).toEqual(['m-1']);
    expect(outcomes[0]).toEqual({ ok: true });
    expect(outcomes[1]).toMatchObject({ ok: false, error: expect.any(PermanentPublishError) });
    expect(outcomes[2]).toMatchObject({ ok: false, error: new Error('route failed') });
  });

  it('sends nothing past the deadline on the clock: every message goes back unsent, with the timeout', async () => {
    const { received, send } = broker();
    const controller = new AbortController();
    // The timer has not fired (a paused process): only the clock says the deadline passed.
    setPublishDeadline(controller, performance.now() - 1, () => new PublishTimeoutError(100));
    const outcomes = await publishRound([record(1), record(2)], controller.signal, {
      item: (r, index) => ({ index, id: r.messageId }),
      send,
      aborted: 'before the broker answered',
      unanswered: () => new Error('unanswered'),
    });
    expect(received).toEqual([]);
    for (const outcome of outcomes) {
      expect(outcome).toMatchObject({
        ok: false,
        sent: false,
        error: expect.any(PublishTimeoutError),
      });
    }
  });

  it('reads the deadline after the checks that ask the broker first, and leaves out what they failed', async () => {
    const { received, send } = broker();
    const controller = new AbortController();
    const outcomes = await publishRound([record(1), record(2)], controller.signal, {
      item: (r, index) => ({ index, id: r.messageId }),
      prepare: (items, outcomes) => {
        outcomes[0] = { ok: false, error: new PermanentPublishError('no such partition') };
        controller.abort(new Error('lease lost'));
        return Promise.resolve(items.slice(1));
      },
      send,
      aborted: 'before the broker answered',
      unanswered: () => new Error('unanswered'),
    });
    expect(received).toEqual([]);
    expect(outcomes[0]).toMatchObject({ ok: false, error: expect.any(PermanentPublishError) });
    expect(outcomes[1]).toMatchObject({ ok: false, sent: false });
    const error = (outcomes[1] as { error: Error }).error;
    expect(error).toBeInstanceOf(PublisherUnavailableError);
    expect(error.message).toBe('The publish was aborted before the broker answered');
  });

  it('fails what the broker left unanswered with unanswered(), counting an attempt', async () => {
    const outcomes = await publishRound([record(1), record(2)], new AbortController().signal, {
      item: (r, index) => ({ index, id: r.messageId }),
      send: (_items, outcomes) => {
        outcomes[0] = { ok: true };
        return Promise.resolve();
      },
      unanswered: () => new PublisherUnavailableError('the channel closed'),
    });
    expect(outcomes[0]).toEqual({ ok: true });
    expect(outcomes[1]).toEqual({
      ok: false,
      error: new PublisherUnavailableError('the channel closed'),
    });
  });
});

describe('cancelledAfterGrace', () => {
  /**
   * A request that answers `answer` after `answerAfterMs` (never when undefined) and rejects as
   * an HTTP client does once its signal aborts; `cancelledAt` is when, from the request's start.
   */
  function request(answerAfterMs?: number) {
    const started = performance.now();
    const state: { cancelledAt?: number } = {};
    const run = (signal: AbortSignal): Promise<string> =>
      new Promise((resolve, reject) => {
        const cancel = (): void => {
          state.cancelledAt = performance.now() - started;
          reject(new Error('Request aborted'));
        };
        if (signal.aborted) return cancel();
        signal.addEventListener('abort', cancel, { once: true });
        if (answerAfterMs !== undefined) setTimeout(() => resolve('answer'), answerAfterMs);
      });
    return { run, state };
  }

  it('an abort other than the deadline leaves the request the grace: an answer within it is kept, and the request is not cancelled', async () => {
    const abort = new AbortController();
    const r = request(60);
    const answered = cancelledAfterGrace(r.run, abort.signal);
    setTimeout(() => abort.abort(new Error('the delivery partitions were lost')), 10);
    await expect(answered).resolves.toBe('answer');
    expect(r.state.cancelledAt).toBeUndefined();
  });

  it('cancels the request as the grace ends when it has not answered, and at once on the deadline or when aborted before it started', async () => {
    const lost = new AbortController();
    const late = request();
    const answered = cancelledAfterGrace(late.run, lost.signal);
    lost.abort(new Error('the dispatcher stopped'));
    await expect(answered).rejects.toThrow('Request aborted');
    expect(late.state.cancelledAt).toBeGreaterThanOrEqual(ABORT_CONFIRM_GRACE_MS - 1);

    const deadline = new AbortController();
    const timedOut = request(60);
    const cancelled = cancelledAfterGrace(timedOut.run, deadline.signal);
    deadline.abort(new PublishTimeoutError(1_000));
    await expect(cancelled).rejects.toThrow('Request aborted');
    expect(timedOut.state.cancelledAt).toBeLessThan(ABORT_CONFIRM_GRACE_MS);

    const before = request(0);
    await expect(
      cancelledAfterGrace(before.run, AbortSignal.abort(new Error('stopped'))),
    ).rejects.toThrow('Request aborted');
    expect(before.state.cancelledAt).toBeDefined();
  });
});

describe('errorChain', () => {
  it('walks the causes once each, at most eight, by the link the client uses', () => {
    const socket = Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });
    const outer = new Error('send failed', { cause: new Error('connection', { cause: socket }) });
    expect(errorChain<Error>(outer).map((e) => e.message)).toEqual([
      'send failed',
      'connection',
      'read ECONNRESET',
    ]);

    const looped: { name: string; cause?: unknown } = { name: 'a' };
    looped.cause = { name: 'b', cause: looped };
    expect(errorChain<{ name: string }>(looped).map((e) => e.name)).toEqual(['a', 'b']);

    let deep: unknown = 'not an object';
    for (let i = 0; i < 20; i++) deep = { depth: i, cause: deep };
    expect(errorChain(deep)).toHaveLength(8);

    const kafkaLike = { name: 'KafkaJSNumberOfRetriesExceeded', originalError: socket };
    expect(
      errorChain<{ cause?: unknown; originalError?: unknown }>(
        kafkaLike,
        (e) => e.cause ?? e.originalError,
      ),
    ).toEqual([kafkaLike, socket]);
  });
});

describe("the kit's option checks in each publisher's options", () => {
  function errorOf(resolve: () => unknown): OutboxOptionsError {
    try {
      resolve();
    } catch (error) {
      if (error instanceof OutboxOptionsError) return error;
      throw error;
    }
    throw new Error('expected an OutboxOptionsError');
  }
  const url = 'amqp://127.0.0.1';
  const connection = 'redis://127.0.0.1:6379';
  const brokers = ['127.0.0.1:9092'];

  it('takes a boolean left out or null as its default, and names the value and the fix otherwise', () => {
    const nulls = { outboxHeaders: null } as unknown as { outboxHeaders?: boolean };
    expect(resolveRabbitMqPublisherOptions({ url, ...nulls }).outboxHeaders).toBe(true);
    const error = errorOf(() =>
      resolveRedisStreamsPublisherOptions({
        connection,
        trim: { maxLen: 10, exact: 'yes' as unknown as boolean },
      }),
    );
    expect(error.option).toBe('trim.exact');
    expect(error.message).toContain('"yes" is not a boolean');
    expect(error.message).toContain('Pass true or false, or leave it out.');
    expect(
      errorOf(() =>
        resolveKafkaPublisherOptions({
          brokers,
          producer: { idempotent: 1 as unknown as boolean },
        }),
      ).message,
    ).toContain('1 is not a boolean. Use true (recommended) or false.');
  });

  it('refuses a route given as anything but a function, and a value outside a kafkajs enum', () => {
    const route = errorOf(() =>
      resolveRedisStreamsPublisherOptions({
        connection,
        stream: 'orders' as unknown as () => string,
      }),
    );
    expect(route.option).toBe('stream');
    expect(route.message).toContain('it is not a function');
    const compression = errorOf(() =>
      resolveKafkaPublisherOptions({ brokers, compression: 99 as CompressionTypes }),
    );
    expect(compression.option).toBe('compression');
    expect(compression.message).toContain('99 is not a CompressionTypes value');
  });
});
