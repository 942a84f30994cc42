/*
 * What a leased batch comes to, as pure functions: no database, no broker, no Nest, no logging.
 * The dispatcher does the I/O around them (claim, publish, settle) and reports what they return.
 *
 * Glossary
 * - outcome: the publisher's answer for one message, `{ ok: true }` or `{ ok: false, error }`,
 *   one per message in input order (`PublishOutcome`).
 * - verdict: what becomes of one claimed message: delivered, retried after a delay, dead
 *   (dead-lettered), or released (handed back unpublished with its attempt given back, after an
 *   outage, a lapsed lease, or a shutdown that came before it was written).
 * - settlement: the verdicts of a batch grouped into the few statements that record them
 *   (`Settlement`), plus the keys whose head left the queue.
 * - outage: the broker could not be reached for the batch as a whole (the publisher threw, every
 *   message failed with `PublisherUnavailableError`, or the publisher broke its contract). No
 *   message counts an attempt; the batch is released and claims pause with backoff. A timeout
 *   is not an outage: the broker may have the messages, so each counts an attempt.
 * - lapsed: the lease deadline (less the time one settle needs) passed before publishing began,
 *   e.g. the process was paused; the batch is released unpublished, since another dispatcher
 *   may already hold it.
 * - fencing: a settle only changes rows that still hold the claim's lease token. A row whose
 *   token no longer matches was taken over by another dispatcher after this one's lease expired;
 *   its outcome here is discarded and it counts as fenced.
 */
import { OutboxHandlerBusyError } from '../../errors/outbox-handler-busy.error';
import { OutboxMessageExpiredError } from '../../errors/outbox-message-expired.error';
import { PermanentPublishError } from '../../errors/permanent-publish.error';
import { PublishTimeoutError } from '../../errors/publish-timeout.error';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import { describeError, errorClassOf } from '../../internal/describe-error';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import type { PublishOutcome } from '../../publishers/outbox-publisher.interface';
import { compareIds } from '../../store/rows/outbox-row.mapper';
import type { ClaimedRecord, Settlement } from '../../store/ports/outbox-store.port';
import { laneOf } from '../../store/rows/redrive-lane';
import { retryDelay, type BackoffPolicy } from './retry-backoff';

/** The retry options a verdict depends on. */
export interface RetryPolicy extends BackoffPolicy {
  readonly maxAttempts: number;
  readonly maxAgeMs: number;
  readonly retryIf: ((error: unknown, record: OutboxRecord) => boolean) | undefined;
}

/**
 * What one message is judged under: its event type's policy (or the module's defaults, named
 * `'default'`).
 */
export interface RecordPolicy {
  /** `'default'`, or the event type whose policy applies: named in the dispatcher's log lines. */
  readonly name: string;
  readonly retry: RetryPolicy;
  /** A dead message of this type lets its key move on (its `onDeadLetter` is `'skip'`). */
  readonly deadAdvancesKey: boolean;
  /** Message expiry (ms since enqueue): older, it is dead-lettered unpublished; 0: none. */
  readonly maxAgeMs: number;
}

/** The policy of each record. */
export type PolicyOf = (record: ClaimedRecord) => RecordPolicy;

export type Verdict =
  /** `fallback`: an `@OnOutboxDeadLetter` fallback settled it, after `error` (its dead letter). */
  | {
      readonly kind: 'delivered';
      readonly fallback?: { readonly name: string; readonly error: unknown };
    }
  | { readonly kind: 'retry'; readonly delayMs: number; readonly error: unknown }
  /** `unpublished`: it expired before its publish, so the claim's attempt is given back. */
  | { readonly kind: 'dead'; readonly error: unknown; readonly unpublished?: boolean }
  | { readonly kind: 'release' };

/** How a publish call ended, before any judgement. */
export type PublishAttempt =
  | { readonly kind: 'returned'; readonly outcomes: readonly PublishOutcome[] }
  | { readonly kind: 'threw'; readonly error: unknown }
  /**
   * The publish deadline passed (and not because of shutdown). `late`: the publisher's answer
   * to the abort, when it came within the grace the lease leaves (see ABORT_ANSWER_GRACE_MS).
   */
  | {
      readonly kind: 'timed-out';
      readonly error: PublishTimeoutError;
      readonly late?: readonly PublishOutcome[];
    }
  /**
   * Shutdown aborted the publish (`shutdownTimeoutMs` passed) and the call has returned. `late`:
   * its answer to the abort; absent when it threw. `error` (the abort's reason): what a message
   * without an answer of its own counts its attempt with.
   */
  | {
      readonly kind: 'stopped';
      readonly error: unknown;
      readonly late?: readonly PublishOutcome[];
    };

/** What the broker side of a batch came to. */
export type PublishResult =
  /**
   * One outcome per published record, in order; none (undefined) for a record left unsent (the
   * rest of a key's run after a failure, or after the broker side failed mid-batch): it goes
   * back with its attempt given back.
   */
  | {
      readonly kind: 'outcomes';
      readonly outcomes: readonly (PublishOutcome | undefined)[];
      /**
       * Some records came back unsent because a call of their key is still running
       * (`OutboxHandlerBusyError`): they go back after `heldReleaseMs`, so that the claims do not
       * take them again and again while it runs.
       */
      readonly heldBack?: boolean;
    }
  /** The broker could not be reached: the batch goes back with its attempts given back. */
  | { readonly kind: 'outage'; readonly error: unknown }
  /** The deadline passed: the broker may have the messages, so each counts as an attempt. */
  | { readonly kind: 'timeout'; readonly error: PublishTimeoutError }
  /** The lease deadline passed before publishing began: nothing was sent. */
  | { readonly kind: 'lapsed' }
  /** Shutdown came before publishing began: nothing was sent. */
  | { readonly kind: 'shutdown' };

/** How the dispatcher's claiming should react to a publish. */
export type OutageReaction =
  /**
   * Pause claims with backoff, logging `what` and `counted`; `probe`: the broker is unreachable,
   * so ask it (where the publisher can be asked) whether it is back.
   */
  | {
      readonly kind: 'pause';
      readonly error: unknown;
      readonly what: string;
      readonly counted: string;
      readonly probe: boolean;
    }
  /** A publish went through: the outage backoff starts over and an outage in progress ends. */
  | { readonly kind: 'resume' }
  /**
   * Nothing was sent, for a reason that says nothing about the broker (every message's key was
   * held by a call still running): no outage begins, and one in progress goes on.
   */
  | { readonly kind: 'none' };

/** What a publish came to, and how claiming should react to it. */
export interface PublishReading {
  readonly result: PublishResult;
  readonly reaction: OutageReaction;
}

/** The records to publish, or why the batch is not published at all. */
export interface BatchPlan {
  /** The records to publish, in claim order (the batch less its exhausted records). */
  readonly fresh: readonly ClaimedRecord[];
  /**
   * Row ids of fresh records not to send: a run's records behind an exhausted record of their
   * key, which is dead-lettered unpublished, so they go back unpublished too.
   */
  readonly held: ReadonlySet<string>;
  /** Set when nothing is to be published: no fresh record, or the lease lapsed. */
  readonly skip: PublishResult | undefined;
}

/** A batch's verdicts (one per record, in claim order) and the settlement recording them. */
export interface BatchJudgement {
  readonly verdicts: readonly Verdict[];
  readonly settlement: Settlement;
  /** How long released rows wait before they are due again. */
  readonly releaseDelayMs: number;
  /** Errors thrown by `retry.retryIf`, in call order, for the dispatcher to log. */
  readonly hookErrors: readonly unknown[];
  /** The settlement of other verdicts for the same batch (after its fallbacks ran). */
  readonly resettle: (verdicts: readonly Verdict[]) => Settlement;
}

/** What a dead message's fallback (`@OnOutboxDeadLetter`) came to. */
export type FallbackAnswer =
  /** It returned `{ settled: true }`: the message is settled (delivered), not dead. */
  | { readonly kind: 'settled'; readonly fallback: string }
  /** It returned nothing: the message is dead-lettered. */
  | { readonly kind: 'declined'; readonly fallback: string }
  /** It threw (or did not finish in time): the message is dead-lettered, the error noted. */
  | { readonly kind: 'failed'; readonly fallback: string; readonly error: unknown };

/**
 * The judgement once the fallbacks of its dead messages answered (by record index): a settled
 * one becomes delivered; the others stay dead, their error noting what the fallback did.
 */
export function withFallbacks(
  judgement: BatchJudgement,
  answers: ReadonlyMap<number, FallbackAnswer>,
): BatchJudgement {
  if (answers.size === 0) return judgement;
  const verdicts = judgement.verdicts.map((verdict, i): Verdict => {
    const answer = answers.get(i);
    if (answer === undefined || verdict.kind !== 'dead') return verdict;
    switch (answer.kind) {
      case 'settled':
        return { kind: 'delivered', fallback: { name: answer.fallback, error: verdict.error } };
      case 'declined':
        return {
          ...verdict,
          error: noted(verdict.error, `fallback ${answer.fallback} declined`),
        };
      case 'failed':
        return {
          ...verdict,
          error: noted(
            verdict.error,
            `fallback ${answer.fallback} failed: ${describeError(answer.error)}`,
          ),
        };
    }
  });
  return { ...judgement, verdicts, settlement: judgement.resettle(verdicts) };
}

/** The error a message dies of, with a note after its text; its class stays the error's. */
function noted(error: unknown, note: string): Error {
  const text = error instanceof Error ? error.message : describeError(error);
  const withNote = new Error(`${text}; ${note}`, { cause: error });
  withNote.name = errorClassOf(error);
  return withNote;
}

export interface JudgeBatchInput {
  /** The whole leased batch, in claim order. */
  readonly records: readonly ClaimedRecord[];
  /** What publishing the batch's fresh records came to. */
  readonly result: PublishResult;
  readonly retry: RetryPolicy;
  /** A dead message lets its key move on (`ordering.onDeadLetter: 'skip'`). */
  readonly deadAdvancesKey: boolean;
  /**
   * Each record's policy (its event type's); left out, every record is judged under `retry`
   * and `deadAdvancesKey`, with no expiry. Give planBatch the same one.
   */
  readonly policyOf?: PolicyOf;
  /** The claim pause in force after an outage (already lengthened for this one). */
  readonly outagePauseMs: number;
  /** How often a paused dispatcher probes the broker, or undefined when it cannot probe. */
  readonly probeEveryMs: number | undefined;
  /** How long records held back by a running call of their key wait before they are due again. */
  readonly heldReleaseMs: number;
  /** Jitter source for retry delays. */
  readonly random?: () => number;
}

/** A settle's end: recorded (`sole` when no earlier try may have landed first), or not. */
export type SettleResult =
  | { readonly kind: 'settled'; readonly changed: number; readonly sole: boolean }
  | { readonly kind: 'unsettled' };

const NOTHING_PUBLISHED: PublishResult = Object.freeze({
  kind: 'outcomes',
  outcomes: Object.freeze([]),
});

/**
 * Claimed more often than maxAttempts allows: earlier claims never reported back (their
 * dispatcher crashed or lost its lease mid-publish), so this one is not tried again.
 */
const isExhausted = (record: ClaimedRecord, maxAttempts: number): boolean =>
  record.attempts > maxAttempts;

/** Past its type's expiry when claimed: dead-lettered without being published. */
const isExpired = (record: ClaimedRecord, policy: RecordPolicy): boolean =>
  policy.maxAgeMs > 0 && record.ageMs >= policy.maxAgeMs;

/** What a record is dead-lettered for before publishing, if it is: exhausted or expired. */
function unpublishable(record: ClaimedRecord, policy: RecordPolicy): Error | undefined {
  const { maxAttempts } = policy.retry;
  if (isExhausted(record, maxAttempts)) {
    return new Error(
      `claimed ${record.attempts} times, more than retry.maxAttempts (${maxAttempts}${policy.name === 'default' ? '' : ` under policy '${policy.name}'`}), without an outcome: the dispatchers holding it crashed or lost their lease while publishing`,
    );
  }
  if (isExpired(record, policy)) {
    return new OutboxMessageExpiredError(policy.name, policy.maxAgeMs, record.ageMs);
  }
  return undefined;
}

/** The policy of every record when no per-type lookup is given: the module's. */
const uniformPolicy = (retry: RetryPolicy, deadAdvancesKey: boolean): PolicyOf => {
  const policy: RecordPolicy = { name: 'default', retry, deadAdvancesKey, maxAgeMs: 0 };
  return () => policy;
};

const isBrokerSilence = (error: unknown): boolean =>
  error instanceof PublishTimeoutError || error instanceof PublisherUnavailableError;

/**
 * A failure the publisher says never reached the broker. A permanent one stays a failure:
 * the message cannot be delivered, written or not.
 */
const isUnsent = (outcome: PublishOutcome): boolean =>
  !outcome.ok && outcome.sent === false && !(outcome.error instanceof PermanentPublishError);

/** Unsent because a call of its key is still running: says nothing about the broker. */
const isHeld = (outcome: PublishOutcome): boolean =>
  !outcome.ok && outcome.error instanceof OutboxHandlerBusyError;

/**
 * Which records of a leased batch to publish. `now` and `publishBy` are on the same monotonic
 * clock; publishing must end early enough to settle within the lease, and past `publishBy`
 * another dispatcher may already hold these messages (this process was paused, e.g. by SIGSTOP
 * or a long GC), so publishing them would duplicate and reorder them.
 */
export function planBatch(
  records: readonly ClaimedRecord[],
  maxAttempts: number,
  now: number,
  publishBy: number,
  /** Each record's policy: exhausted under its own `maxAttempts`, or past its expiry. */
  policyOf?: PolicyOf,
): BatchPlan {
  const spent = (r: ClaimedRecord): boolean =>
    policyOf === undefined
      ? isExhausted(r, maxAttempts)
      : unpublishable(r, policyOf(r)) !== undefined;
  const exhausted = records.filter(spent);
  const fresh = exhausted.length > 0 ? records.filter((r) => !spent(r)) : records;
  const held = new Set(
    fresh
      .filter((r) =>
        exhausted.some(
          (x) => laneOf(x) !== null && laneOf(x) === laneOf(r) && compareIds(x, r) < 0,
        ),
      )
      .map((r) => r.id),
  );
  if (fresh.length === 0) return { fresh, held, skip: NOTHING_PUBLISHED };
  if (now >= publishBy) return { fresh, held, skip: { kind: 'lapsed' } };
  return { fresh, held, skip: undefined };
}

/** Reads a publish of `sent` messages: what it came to, and how claiming should react. */
export function readPublish(attempt: PublishAttempt, sent: number): PublishReading {
  switch (attempt.kind) {
    case 'threw':
      return {
        result: { kind: 'outage', error: attempt.error },
        reaction: pause(attempt.error, 'publisher failed', 'no attempt counted', true),
      };
    case 'timed-out': {
      // The broker may be hanging: claim less eagerly, but the attempts count, so a message
      // that always times out reaches maxAttempts instead of looping.
      const timedOut = pause(
        attempt.error,
        'publish did not finish in time',
        'each message counts an attempt',
        false,
      );
      // The publisher's answer to the abort says more than the deadline does: what the broker
      // confirmed before it is delivered (not published again), and what was never written
      // gets its attempt back. Without one (or with one that breaks the contract), every
      // message may be at the broker.
      const late = attempt.late?.length === sent ? readOutcomes(attempt.late, sent) : undefined;
      if (late === undefined) {
        return { result: { kind: 'timeout', error: attempt.error }, reaction: timedOut };
      }
      return {
        result: late.result,
        reaction: late.reaction.kind === 'pause' ? late.reaction : timedOut,
      };
    }
    case 'returned':
      return readOutcomes(attempt.outcomes, sent);
    case 'stopped':
      // Shutdown, not the broker, ended the publish: no outage begins or ends.
      return {
        result: stoppedResult(attempt.error, attempt.late, sent),
        reaction: { kind: 'none' },
      };
  }
}

/**
 * What a publish cut short by shutdown says, message by message: what the broker confirmed is
 * delivered, what was never written (or was held back by a call of its key) goes back with its
 * attempt given back, and every other message counts an attempt, since the broker may have it.
 * Never an outage, whose release gives every attempt back. Without an answer (the call threw,
 * or broke its contract), every message may be at the broker: a timed-out attempt each.
 */
function stoppedResult(
  error: unknown,
  late: readonly PublishOutcome[] | undefined,
  sent: number,
): PublishResult {
  if (late?.length !== sent) {
    return {
      kind: 'outcomes',
      outcomes: Array.from({ length: sent }, () => ({ ok: false, error })),
    };
  }
  const heldBack = late.some(isHeld);
  return {
    kind: 'outcomes',
    outcomes: late.map((o) => (isUnsent(o) || isHeld(o) ? undefined : o)),
    ...(heldBack ? { heldBack } : {}),
  };
}

function readOutcomes(outcomes: readonly PublishOutcome[], sent: number): PublishReading {
  if (outcomes.length !== sent) {
    const error = new Error(`Publisher returned ${outcomes.length} outcomes for ${sent} messages`);
    return {
      result: { kind: 'outage', error },
      reaction: pause(error, 'publisher broke its contract', 'no attempt counted', false),
    };
  }
  // Only a batch that failed as a whole for being unable to reach the broker is an outage;
  // one message "unavailable" while others went through is that message's failure. Messages
  // held back by a running call of their key were not offered to the broker: they count for
  // neither side.
  const heldBack = outcomes.some(isHeld);
  const offered = heldBack ? outcomes.filter((o) => !isHeld(o)) : outcomes;
  const failures = offered.filter((o) => !o.ok);
  const first = failures[0];
  // Unsent messages get no outcome: they go back with their attempt given back.
  const someUnsent = heldBack || failures.some(isUnsent);
  const judged = someUnsent ? outcomes.map((o) => (isUnsent(o) ? undefined : o)) : outcomes;
  const read = (reaction: OutageReaction): PublishReading => ({
    result: { kind: 'outcomes', outcomes: judged, ...(heldBack ? { heldBack } : {}) },
    reaction,
  });
  if (offered.length === 0) return read({ kind: 'none' });
  if (first !== undefined && failures.length === offered.length) {
    if (
      failures.every((o) => !o.ok && (isUnsent(o) || o.error instanceof PublisherUnavailableError))
    ) {
      return {
        result: { kind: 'outage', error: first.error },
        reaction: pause(
          first.error,
          failures.every(isUnsent)
            ? 'no message of the batch could be sent'
            : 'every publish of the batch failed',
          'no attempt counted',
          true,
        ),
      };
    }
    // Every message timed out (or could not be sent): the broker may be hanging, so claim
    // less eagerly; but the attempts of what was sent count, as for a batch that hit the
    // deadline.
    if (failures.every((o) => !o.ok && (isUnsent(o) || isBrokerSilence(o.error)))) {
      return read(
        pause(
          first.error,
          'every publish of the batch timed out',
          someUnsent ? 'each message sent counts an attempt' : 'each counts an attempt',
          false,
        ),
      );
    }
  }
  return read({ kind: 'resume' });
}

const pause = (error: unknown, what: string, counted: string, probe: boolean): OutageReaction => ({
  kind: 'pause',
  error,
  what,
  counted,
  probe,
});

/**
 * Judges every record of a leased batch and groups the verdicts into a settlement. Calls
 * `retry.retryIf` (a user callback) for failed messages; one that throws allows the retry.
 */
export function judgeBatch(input: JudgeBatchInput): BatchJudgement {
  const { records, result } = input;
  const policyOf = input.policyOf ?? uniformPolicy(input.retry, input.deadAdvancesKey);
  const hookErrors: unknown[] = [];
  const judge = (record: ClaimedRecord, outcome: PublishOutcome | undefined): Verdict =>
    judgeOutcome(record, outcome, policyOf(record), hookErrors, input.random);
  let index = 0;
  const verdicts = records.map((record): Verdict => {
    const spent = unpublishable(record, policyOf(record));
    if (spent !== undefined) {
      // An expiry found at the claim is not an attempt: nothing was published.
      return spent instanceof OutboxMessageExpiredError
        ? { kind: 'dead', error: spent, unpublished: true }
        : { kind: 'dead', error: spent };
    }
    const i = index++;
    switch (result.kind) {
      case 'outage':
      case 'shutdown':
      case 'lapsed':
        return { kind: 'release' };
      case 'timeout':
        return judge(record, { ok: false, error: result.error });
      case 'outcomes':
        return judge(record, result.outcomes[i]);
    }
  });
  // Released rows wait out the pause, so that other dispatchers do not run into the same
  // outage; where the publisher can be probed, the pause may end at the broker's return,
  // and the rows must be due by then.
  const releaseDelayMs =
    result.kind !== 'outage'
      ? result.kind === 'outcomes' && result.heldBack === true
        ? input.heldReleaseMs
        : 0
      : input.probeEveryMs === undefined
        ? input.outagePauseMs
        : Math.min(input.outagePauseMs, input.probeEveryMs * 2);
  // Only an outage's release is a failed attempt (recorded in the history); a shutdown or a
  // lapsed lease hands the batch back without one.
  const releaseError =
    result.kind === 'outage'
      ? { error: describeError(result.error), errorClass: errorClassOf(result.error) }
      : null;
  const resettle = (judged: readonly Verdict[]): Settlement =>
    settlementOf(
      records,
      judged,
      releaseDelayMs,
      releaseError,
      (record) => policyOf(record).deadAdvancesKey,
    );
  return { verdicts, settlement: resettle(verdicts), releaseDelayMs, hookErrors, resettle };
}

function judgeOutcome(
  record: ClaimedRecord,
  outcome: PublishOutcome | undefined,
  policy: RecordPolicy,
  hookErrors: unknown[],
  random: (() => number) | undefined,
): Verdict {
  const { retry } = policy;
  if (outcome === undefined) return { kind: 'release' };
  if (outcome.ok) return { kind: 'delivered' };
  const { error } = outcome;
  if (error instanceof PermanentPublishError) return { kind: 'dead', error };
  if (retry.retryIf !== undefined && !retryAllowed(retry.retryIf, error, record, hookErrors)) {
    return { kind: 'dead', error };
  }
  // The claim counted this attempt already.
  const attempt = record.attempts;
  if (attempt >= retry.maxAttempts) return { kind: 'dead', error };
  const delayMs = retryDelay(attempt, retry, random);
  if (retry.maxAgeMs > 0 && record.ageMs + delayMs > retry.maxAgeMs) return { kind: 'dead', error };
  // The message's expiry: a retry that would come due past it could never be delivered in time.
  if (policy.maxAgeMs > 0 && record.ageMs + delayMs >= policy.maxAgeMs) {
    return {
      kind: 'dead',
      error: new OutboxMessageExpiredError(policy.name, policy.maxAgeMs, record.ageMs, error),
    };
  }
  return { kind: 'retry', delayMs, error };
}

/** A user's `retryIf` must never stop delivery: one that throws allows the retry. */
function retryAllowed(
  retryIf: NonNullable<RetryPolicy['retryIf']>,
  error: unknown,
  record: ClaimedRecord,
  hookErrors: unknown[],
): boolean {
  try {
    // A JavaScript caller's retryIf may return nothing: that allows the retry.
    const allowed: boolean | undefined = retryIf(error, record);
    return allowed ?? true;
  } catch (hookError) {
    hookErrors.push(hookError);
    return true;
  }
}

/** Hands a whole batch back unpublished, due at once, its `last_error` left as it was. */
export function releaseSettlement(records: readonly ClaimedRecord[]): Settlement {
  return settlementOf(
    records,
    records.map((): Verdict => ({ kind: 'release' })),
    0,
    null,
    () => false,
  );
}

function settlementOf(
  records: readonly ClaimedRecord[],
  verdicts: readonly Verdict[],
  releaseDelayMs: number,
  releaseError: { readonly error: string; readonly errorClass: string } | null,
  deadAdvancesKey: (record: ClaimedRecord) => boolean,
): Settlement {
  const delivered: string[] = [];
  const fallback: NonNullable<Settlement['fallback']>[number][] = [];
  const retry: Settlement['retry'][number][] = [];
  const dead: Settlement['dead'][number][] = [];
  const release: Settlement['release'][number][] = [];
  const advanced = new Set<string>();
  records.forEach((record, i) => {
    const verdict = verdicts[i] ?? { kind: 'release' };
    // Promotion goes by lane: a re-drive copy's next copy, not its key's next live message.
    const lane = laneOf(record);
    switch (verdict.kind) {
      case 'delivered':
        delivered.push(record.id);
        if (verdict.fallback !== undefined) {
          fallback.push({
            id: record.id,
            error: `fallback ${verdict.fallback.name} settled it after: ${describeError(verdict.fallback.error)}`,
            errorClass: errorClassOf(verdict.fallback.error),
          });
        }
        if (lane !== null) advanced.add(lane);
        break;
      case 'retry':
        retry.push({
          id: record.id,
          delayMs: verdict.delayMs,
          error: describeError(verdict.error),
          errorClass: errorClassOf(verdict.error),
        });
        break;
      case 'dead': {
        // A dead message advances its key only when dead messages do not block.
        const advances = deadAdvancesKey(record);
        dead.push({
          id: record.id,
          error: describeError(verdict.error),
          errorClass: errorClassOf(verdict.error),
          ...(verdict.unpublished === true ? { unpublished: true } : {}),
          ...(advances ? { advancesKey: true } : {}),
        });
        if (lane !== null && advances) advanced.add(lane);
        break;
      }
      case 'release':
        release.push({
          id: record.id,
          delayMs: releaseDelayMs,
          error: releaseError?.error ?? null,
          errorClass: releaseError?.errorClass ?? null,
        });
        break;
    }
  });
  return {
    delivered,
    ...(fallback.length > 0 ? { fallback } : {}),
    retry,
    dead,
    release,
    advancedKeys: [...advanced],
    ...createdRangeOf(records),
  };
}

function createdRangeOf(records: readonly ClaimedRecord[]): Pick<Settlement, 'createdRange'> {
  if (records.length === 0) return {};
  let from = Infinity;
  let to = -Infinity;
  for (const { createdAt } of records) {
    from = Math.min(from, createdAt.getTime());
    to = Math.max(to, createdAt.getTime());
  }
  if (!Number.isFinite(from) || !Number.isFinite(to)) return {};
  return { createdRange: { from: new Date(from - 1), to: new Date(to + 1) } };
}

/** The report of a settled (or unsettled) batch of `claimed` records. */
export function batchReport(
  claimed: number,
  settlement: Settlement,
  settled: SettleResult,
  durationMs: number,
): OutboxBatchReport {
  return {
    claimed,
    published: settlement.delivered.length,
    retried: settlement.retry.length,
    deadLettered: settlement.dead.length,
    released: settlement.release.length,
    // Only a settle known to be the first to land can tell that rows were taken over: after a
    // try that was given up on (and may have committed late), fewer changed rows prove nothing.
    fenced: settled.kind === 'settled' && settled.sole ? claimed - settled.changed : 0,
    durationMs,
  };
}
