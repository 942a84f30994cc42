import {
  PermanentPublishError,
  PublisherUnavailableError,
  type OutboxPublisher,
  type OutboxRecord,
  type PublishOutcome,
} from '../../lib';

/**
 * How a scripted message fails:
 * - `retryable`: a plain error outcome (the dispatcher backs off and retries);
 * - `permanent`: a `PermanentPublishError` outcome (dead-lettered at once);
 * - `unavailable`: a `PublisherUnavailableError` outcome (released, no attempt counted);
 * - `hang`: the whole `publish()` call never answers until the dispatcher aborts it.
 */
export type FailureKind = 'retryable' | 'permanent' | 'unavailable' | 'hang';

/** Which messages a rule applies to: a message id, `{ key }`, `{ messageId }` or a predicate. */
export type MessageMatcher =
  | string
  | { readonly key?: string | null; readonly messageId?: string }
  | ((record: OutboxRecord) => boolean);

interface FailureRule {
  readonly match: (record: OutboxRecord) => boolean;
  readonly kind: FailureKind;
  readonly error: unknown;
  remaining: number;
}

function toPredicate(matcher: MessageMatcher): (record: OutboxRecord) => boolean {
  if (typeof matcher === 'function') return matcher;
  if (typeof matcher === 'string') return (r) => r.messageId === matcher;
  return (r) =>
    (matcher.messageId === undefined || r.messageId === matcher.messageId) &&
    (matcher.key === undefined || r.key === matcher.key);
}

/** The dispatcher aborts with an Error (PublishTimeoutError / PublisherUnavailableError). */
const reasonOf = (signal: AbortSignal): Error =>
  signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason));

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(reasonOf(signal));
      },
      { once: true },
    );
  });

/**
 * An in-memory test double of a broker: records what it "sent" and fails on script. A unit-style
 * double for functional dispatcher tests only; delivery proofs use a real transport.
 */
export class RecordingPublisher implements OutboxPublisher {
  /** Messages acknowledged as published, in publication order (duplicates included). */
  readonly sent: OutboxRecord[] = [];
  /** Every `publish()` call with the messages it was given. */
  readonly calls: OutboxRecord[][] = [];
  /** Number of `publish()` calls currently hanging. */
  hanging = 0;
  closed = false;
  private rules: FailureRule[] = [];
  private down: Error | undefined;
  private delayMs = 0;
  private readonly waiters = new Set<() => void>();

  /** Makes matching messages fail the given way, `times` times (default: every time). */
  fail(
    matcher: MessageMatcher,
    kind: FailureKind,
    options: { times?: number; error?: unknown } = {},
  ): this {
    this.rules.push({
      match: toPredicate(matcher),
      kind,
      error: options.error,
      remaining: options.times ?? Infinity,
    });
    return this;
  }

  /** Every `publish()` throws (a broker outage) until `comeBack()`. */
  goDown(
    error: Error = new PublisherUnavailableError('connect ECONNREFUSED 127.0.0.1:5672'),
  ): this {
    this.down = error;
    return this;
  }

  comeBack(): this {
    this.down = undefined;
    return this;
  }

  /** Each `publish()` takes this long before answering (abortable). */
  slow(ms: number): this {
    this.delayMs = ms;
    return this;
  }

  /** Drops every failure rule and outage; hanging calls stay hung until aborted. */
  heal(): this {
    this.rules = [];
    this.down = undefined;
    this.delayMs = 0;
    return this;
  }

  get sentIds(): string[] {
    return this.sent.map((r) => r.messageId);
  }

  /** Message ids published for one key, in publication order. */
  sentForKey(key: string | null): string[] {
    return this.sent.filter((r) => r.key === key).map((r) => r.messageId);
  }

  /** How many times `publish()` was handed this message (successful or not). */
  attemptsOf(messageId: string): number {
    return this.calls.reduce(
      (n, call) => n + call.filter((r) => r.messageId === messageId).length,
      0,
    );
  }

  /** Resolves once `predicate` holds; rejects after `timeoutMs`. */
  async until(
    predicate: (p: this) => boolean,
    timeoutMs = 10_000,
    what = 'condition',
  ): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate(this)) {
      const left = deadline - Date.now();
      if (left <= 0)
        throw new Error(
          `RecordingPublisher: timed out after ${timeoutMs} ms waiting for ${what} (sent ${this.sent.length}, calls ${this.calls.length})`,
        );
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, Math.min(left, 50));
        this.waiters.add(done);
        function done(): void {
          clearTimeout(timer);
          resolve();
        }
      });
    }
  }

  async publish(messages: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    this.calls.push([...messages]);
    this.notify();
    if (this.down !== undefined) throw this.down;
    if (messages.some((m) => this.ruleFor(m, false)?.kind === 'hang')) {
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
    if (this.delayMs > 0) await sleep(this.delayMs, signal);
    const outcomes = messages.map((m): PublishOutcome => {
      const rule = this.ruleFor(m, true);
      if (rule === undefined) {
        this.sent.push(m);
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

  close(): Promise<void> {
    this.closed = true;
    return Promise.resolve();
  }

  private ruleFor(record: OutboxRecord, consume: boolean): FailureRule | undefined {
    const rule = this.rules.find((r) => r.remaining > 0 && r.match(record));
    if (rule !== undefined && consume) rule.remaining -= 1;
    return rule;
  }

  private notify(): void {
    for (const waiter of [...this.waiters]) waiter();
    this.waiters.clear();
  }
}
