import { PermanentPublishError } from '../errors/permanent-publish.error';
import { PublisherUnavailableError } from '../errors/publisher-unavailable.error';
import type { OutboxPublisher, PublishOutcome } from '../publishers/outbox-publisher.interface';
import type { OutboxRecord } from '../message/outbox-record.interface';
import { refuseUnknownTestingOptions } from './testing-option-keys';

/**
 * How a scripted message fails:
 * - `'retryable'`: a plain error outcome; the dispatcher backs off and retries the message;
 * - `'permanent'`: a `PermanentPublishError` outcome; the message is dead-lettered at once;
 * - `'unavailable'`: a `PublisherUnavailableError` outcome; when every message of a batch fails
 *   so, the batch is released as an outage, without counting an attempt;
 * - `'hang'`: the whole `publish()` call never answers, until the dispatcher aborts it (its
 *   `publishTimeoutMs`, or shutdown).
 */
export type RecordingFailure = 'retryable' | 'permanent' | 'unavailable' | 'hang';

/**
 * Which messages a failure applies to: a message id, an object whose given fields must all match
 * (`{ topic: 'orders' }`, `{ key: 'o-1' }`; `key: null` matches messages without a key), or a
 * predicate.
 */
export type RecordingMatcher =
  | string
  | {
      readonly messageId?: string;
      readonly topic?: string;
      readonly key?: string | null;
      readonly type?: string;
    }
  | ((record: OutboxRecord) => boolean);

/** How often a scripted failure applies, and the error it reports. */
export interface RecordingFailureOptions {
  /** How many matching messages fail (each counts once). @default every matching message */
  times?: number;
  /** The error of the failure outcome (or thrown for `goDown`). @default an error of the kind's class */
  error?: unknown;
}

interface FailureRule {
  readonly match: (record: OutboxRecord) => boolean;
  readonly kind: RecordingFailure;
  readonly error: unknown;
  remaining: number;
}

const MATCHER_KEYS = {
  '': { messageId: true, topic: true, key: true, type: true } satisfies Record<
    keyof Exclude<RecordingMatcher, string | ((record: OutboxRecord) => boolean)>,
    true
  >,
};
const FAILURE_OPTION_KEYS = {
  '': { times: true, error: true } satisfies Record<keyof RecordingFailureOptions, true>,
};

function toPredicate(matcher: RecordingMatcher): (record: OutboxRecord) => boolean {
  if (typeof matcher === 'function') return matcher;
  if (typeof matcher === 'string') return (r) => r.messageId === matcher;
  // A misspelt field (`{ topc }`) would otherwise match every message.
  refuseUnknownTestingOptions('RecordingPublisher matcher', matcher, MATCHER_KEYS);
  return (r) =>
    (matcher.messageId === undefined || r.messageId === matcher.messageId) &&
    (matcher.topic === undefined || r.topic === matcher.topic) &&
    (matcher.key === undefined || r.key === matcher.key) &&
    (matcher.type === undefined || r.type === matcher.type);
}

// The dispatcher aborts with an Error (PublishTimeoutError, PublisherUnavailableError).
const reasonOf = (signal: AbortSignal): Error =>
  signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason));

const sleep = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(reasonOf(signal));
      return;
    }
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(reasonOf(signal));
      },
      { once: true },
    );
  });

/**
 * An in-memory publisher for tests of your own code: it records what the dispatcher published
 * and can fail on script, so you can assert which events your code enqueued (after commit) and
 * how your app behaves when the broker refuses them.
 *
 * ```ts
 * const publisher = new RecordingPublisher();
 * // OutboxModule.forRoot({ dataSource, publisher, autoStart: false })
 * await orders.create({ customerId: 'c-1', total: 42 });
 * await app.get(OutboxDispatcher).drain();
 * expect(publisher.payloads({ type: 'order.created' })).toEqual([{ orderId: expect.any(String), total: 42 }]);
 * ```
 *
 * It is a stand-in for a broker, not a broker: to prove delivery, test against the real one.
 */
export class RecordingPublisher implements OutboxPublisher {
  /**
   * Messages acknowledged as published, in publication order; a message the dispatcher
   * publishes again (after a lease expired, say) appears again.
   */
  readonly messages: OutboxRecord[] = [];
  /** Every `publish()` call with the messages it was handed, published or not. */
  readonly calls: OutboxRecord[][] = [];
  /** How many `publish()` calls are hanging now (see `'hang'`). */
  hanging = 0;
  /** Whether the module closed the publisher (at application shutdown). */
  closed = false;

  private rules: FailureRule[] = [];
  private down: Error | undefined;
  private delayMs = 0;
  private readonly waiters = new Set<() => void>();

  /** Ids of the published messages, in publication order. */
  get messageIds(): string[] {
    return this.messages.map((r) => r.messageId);
  }

  /** The published messages that match, in publication order. */
  messagesFor(matcher: RecordingMatcher): OutboxRecord[] {
    return this.messages.filter(toPredicate(matcher));
  }

  /**
   * The parsed JSON payloads of the published messages (those that match, if given), in
   * publication order; a binary message's bytes as a `Buffer`. `T` is what you expect them to
   * be; nothing checks it.
   */
  payloads<T = unknown>(matcher?: RecordingMatcher): T[] {
    const records = matcher === undefined ? this.messages : this.messagesFor(matcher);
    return records.map((r) =>
      r.encoding === 'binary' ? (Buffer.from(r.payload) as T) : (JSON.parse(r.payload) as T),
    );
  }

  /** How many times `publish()` was handed this message, whatever the outcome. */
  attemptsOf(messageId: string): number {
    return this.calls.reduce(
      (n, call) => n + call.filter((r) => r.messageId === messageId).length,
      0,
    );
  }

  /** Makes matching messages fail the given way, `times` times (default: every time). */
  fail(
    matcher: RecordingMatcher,
    kind: RecordingFailure = 'retryable',
    options: RecordingFailureOptions = {},
  ): this {
    refuseUnknownTestingOptions('RecordingPublisher.fail()', options, FAILURE_OPTION_KEYS);
    this.rules.push({
      match: toPredicate(matcher),
      kind,
      error: options.error,
      remaining: options.times ?? Infinity,
    });
    return this;
  }

  /** Makes the next message handed to `publish()` fail (the next `times` messages, if given). */
  failNext(kind: RecordingFailure = 'retryable', options: RecordingFailureOptions = {}): this {
    return this.fail(() => true, kind, { times: 1, ...options });
  }

  /** A broker outage: every `publish()` and `ping()` rejects with `error` until `comeBack()`. */
  goDown(
    error: Error = new PublisherUnavailableError('connect ECONNREFUSED (RecordingPublisher)'),
  ): this {
    this.down = error;
    return this;
  }

  /** Ends the outage begun by `goDown()`. */
  comeBack(): this {
    this.down = undefined;
    return this;
  }

  /** Each `publish()` takes this long before answering (and gives up when aborted). */
  slow(ms: number): this {
    this.delayMs = ms;
    return this;
  }

  /** Drops every scripted failure, the outage and the delay; hanging calls stay hung until aborted. */
  heal(): this {
    this.rules = [];
    this.down = undefined;
    this.delayMs = 0;
    return this;
  }

  /** Forgets the recorded messages and calls, e.g. between tests that share the publisher. */
  clear(): this {
    this.messages.length = 0;
    this.calls.length = 0;
    return this;
  }

  /**
   * Resolves once `predicate` holds, checked after every publish; rejects after `timeoutMs`.
   * For tests where the dispatcher runs on its own (`autoStart`): `await publisher.until((p) =>
   * p.messages.length === 3)`.
   */
  async until(
    predicate: (publisher: this) => boolean,
    timeoutMs = 10_000,
    what = 'the condition',
  ): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate(this)) {
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(
          `RecordingPublisher: timed out after ${timeoutMs} ms waiting for ${what} (published ${this.messages.length}, calls ${this.calls.length})`,
        );
      }
      await new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer);
          this.waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, Math.min(left, 50));
        this.waiters.add(done);
      });
    }
  }

  async publish(messages: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    this.calls.push([...messages]);
    this.notify();
    if (this.down !== undefined) throw this.down;
    const hang = messages.some((m) => this.ruleFor(m, 'hang') !== undefined);
    if (hang) await this.hangUntilAborted(signal);
    if (this.delayMs > 0) await sleep(this.delayMs, signal);
    const outcomes = messages.map((m): PublishOutcome => {
      const rule = this.ruleFor(m);
      if (rule === undefined) {
        this.messages.push(m);
        return { ok: true };
      }
      switch (rule.kind) {
        case 'permanent':
          return {
            ok: false,
            error:
              rule.error ?? new PermanentPublishError(`rejected by the broker: ${m.messageId}`),
          };
        case 'unavailable':
          return {
            ok: false,
            error: rule.error ?? new PublisherUnavailableError('connection lost'),
          };
        default:
          return {
            ok: false,
            error: rule.error ?? new Error(`scripted failure of ${m.messageId}`),
          };
      }
    });
    this.notify();
    return outcomes;
  }

  /** Answers like a reachable broker, or rejects during `goDown()`. */
  ping(): Promise<void> {
    return this.down === undefined ? Promise.resolve() : Promise.reject(this.down);
  }

  close(): Promise<void> {
    this.closed = true;
    return Promise.resolve();
  }

  private async hangUntilAborted(signal: AbortSignal): Promise<void> {
    this.hanging += 1;
    this.notify();
    try {
      await new Promise<never>((_, reject) => {
        if (signal.aborted) reject(reasonOf(signal));
        signal.addEventListener('abort', () => reject(reasonOf(signal)), { once: true });
      });
    } finally {
      this.hanging -= 1;
      this.notify();
    }
  }

  /**
   * The first rule with uses left that matches, counting one use. With `only`, a rule of that
   * kind; without, any rule but `'hang'`, which is applied before publishing.
   */
  private ruleFor(record: OutboxRecord, only?: RecordingFailure): FailureRule | undefined {
    const rule = this.rules.find(
      (r) =>
        r.remaining > 0 &&
        (only === undefined ? r.kind !== 'hang' : r.kind === only) &&
        r.match(record),
    );
    if (rule !== undefined) rule.remaining -= 1;
    return rule;
  }

  private notify(): void {
    for (const waiter of [...this.waiters]) waiter();
  }
}
