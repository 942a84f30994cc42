import { PermanentPublishError } from '../../errors/permanent-publish.error';
import { PublishTimeoutError } from '../../errors/publish-timeout.error';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import { describeError } from '../../internal/describe-error';
import type { PublishOutcome } from '../outbox-publisher.interface';

/**
 * What a broker publisher answers for a message the publish did not settle: the dispatcher
 * aborts with a `PublishTimeoutError` (or an outage), which is kept as it is so that the
 * dispatcher judges it as its own; any other reason is an outage, so no attempt is burnt on it.
 *
 * `what` ends the message: 'before Redis answered' gives "The publish was aborted before Redis
 * answered"; without it the message stops at "aborted".
 */
export function abortReason(signal: AbortSignal, what?: string): Error {
  const reason: unknown = signal.reason;
  return reason instanceof PublishTimeoutError || reason instanceof PublisherUnavailableError
    ? reason
    : new PublisherUnavailableError(
        what === undefined ? 'The publish was aborted' : `The publish was aborted ${what}`,
        { cause: reason },
      );
}

/**
 * How long a publisher keeps waiting for what it already wrote once the dispatcher aborts a
 * publish for a reason other than its deadline (the batch's hold was lost, the app is stopping):
 * what the broker acknowledges meanwhile is answered as delivered (its settle stays fenced),
 * where an answer at once would have the dispatcher publish it again later as a copy. Brokers
 * answer within milliseconds, and the dispatcher reads the answer to an abort for 250 ms.
 */
export const ABORT_CONFIRM_GRACE_MS = 200;

/** Whether `signal`'s abort leaves what was written ABORT_CONFIRM_GRACE_MS (not the deadline's). */
export function abortLeavesGrace(signal: AbortSignal): boolean {
  return !(signal.reason instanceof PublishTimeoutError);
}

/**
 * What `work` answers within ABORT_CONFIRM_GRACE_MS, for a publish aborted for a reason that
 * leaves a grace (abortLeavesGrace); undefined when it leaves none, or when `work` rejects or
 * does not answer in time. At once when `work` has settled already.
 */
export async function answerWithinGrace<T>(
  work: Promise<T>,
  signal: AbortSignal,
): Promise<{ value: T } | undefined> {
  if (!abortLeavesGrace(signal)) return undefined;
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      work.then(
        (value) => ({ value }),
        () => undefined,
      ),
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), ABORT_CONFIRM_GRACE_MS);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs `request` (one call to the broker that its client can cancel, such as an HTTP request)
 * under a signal of its own that follows `signal`: cancelled at once by an abort that leaves no
 * grace (the deadline's), and by any other abort only once ABORT_CONFIRM_GRACE_MS has passed
 * without an answer. A request already sent may have been taken, and its answer, if it comes in
 * time, tells which of its messages were; cancelling it at once would leave them all to be sent
 * again. Settles as the request does (rejecting with the client's abort error once cancelled).
 */
export async function cancelledAfterGrace<T>(
  request: (signal: AbortSignal) => Promise<T>,
  signal: AbortSignal,
): Promise<T> {
  const own = new AbortController();
  // Aborted before anything was sent: there is no answer to wait for.
  if (signal.aborted) own.abort(signal.reason);
  const work = request(own.signal);
  const settled = work.then(
    () => true,
    () => true,
  );
  if (
    (await untilAborted(settled, signal)) === undefined &&
    (await answerWithinGrace(work, signal)) === undefined
  ) {
    // Out of time, or failed already (which the cancel leaves as it is).
    own.abort(signal.reason);
  }
  return work;
}

/**
 * Resolves to the result of `work`, or to undefined as soon as `signal` aborts. The work is left
 * to finish: a publisher stops waiting for the broker's answer without tearing down what other
 * batches share (a producer, a connection).
 */
export async function untilAborted<T>(
  work: Promise<T>,
  signal: AbortSignal,
): Promise<T | undefined> {
  if (signal.aborted) return undefined;
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<undefined>((resolve) => {
    onAbort = () => resolve(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    return await Promise.race([work, aborted]);
  } finally {
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
  }
}

/** `error` as an outage: the dispatcher hands the batch back without counting attempts. */
export function toUnavailable(error: unknown, what: string): PublisherUnavailableError {
  if (error instanceof PublisherUnavailableError) return error;
  return new PublisherUnavailableError(`${what}: ${describeError(error)}`, { cause: error });
}

/** `error` as the failure of a message that can never be delivered as it is: no retry. */
export function toPermanent(error: unknown, what: string): PermanentPublishError {
  return new PermanentPublishError(`${what}: ${describeError(error)}`, { cause: error });
}

/** A failure of a message that was never written: it goes back without an attempt. */
export function unsent(error: unknown): PublishOutcome {
  return { ok: false, error, sent: false };
}

/**
 * The outcomes of a publish, each message the broker left unanswered failing with the abort
 * reason (when the publish was aborted) or with `unanswered()`. The error is made once, and
 * only when a message needs it: an error captures a stack, which costs more than the rest of a
 * batch's bookkeeping (CPU profiles of bench P1 and of a drain). A copy, since a send left to
 * finish after an abort may still write into `outcomes`.
 */
export function answerAll(
  outcomes: readonly (PublishOutcome | undefined)[],
  signal: AbortSignal,
  abortedWhat: string | undefined,
  unanswered: () => Error,
): PublishOutcome[] {
  let error: Error | undefined;
  return outcomes.map(
    (o) =>
      o ?? {
        ok: false,
        error: (error ??= signal.aborted ? abortReason(signal, abortedWhat) : unanswered()),
      },
  );
}
