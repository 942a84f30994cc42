import type { Settlement } from '../ports/outbox-store.port';

/**
 * The attempt history: one row per failed publish attempt of a message, in `<table>_attempts`,
 * written by the store's settle in the same transaction as the failure it records (on delivery
 * only for the run of a fallback that settled the message: `fallback`), keyed by message id so
 * that a message moved to the end of its key keeps it, and deleted with its message.
 */

/**
 * How many attempts of one message the history keeps: the latest ones. A message retried
 * without end (`retry.maxAttempts: Infinity`) would otherwise grow it forever.
 */
export const ATTEMPT_HISTORY_LIMIT = 50;

/** The history's columns, in the order the stores insert them. */
export const ATTEMPT_COLUMNS = 'message_id, attempt, outcome, locked_by, error_class, error';

/**
 * The outcomes an attempt-history row may have. `fallback`: an `@OnOutboxDeadLetter` fallback
 * settled the message instead of its dead letter (schema step 8 lets the table hold it).
 */
export const ATTEMPT_OUTCOMES = ['retry', 'dead', 'outage', 'fallback'] as const;

/** The outcomes before schema step 8, which its revert narrows the check back to. */
export const ATTEMPT_OUTCOMES_BEFORE_FALLBACK = ['retry', 'dead', 'outage'] as const;

/** The history's outcome check, over fixed words only (never user input). */
export function attemptOutcomeCheck(outcomes: readonly string[] = ATTEMPT_OUTCOMES): string {
  return `CHECK (outcome IN (${outcomes.map((o) => `'${o}'`).join(', ')}))`;
}

/** The name of the outcome check, as step 8 and new tables give it. */
export function attemptOutcomeCheckName(n: { readonly tableName: string }): string {
  return `${n.tableName}_attempts_chk`;
}

/** One failure a settle records: the row's id, its outcome, the error's class and text. */
export type FailedAttempt = readonly [id: string, outcome: string, cls: string | null, err: string];

/**
 * The history rows of a settle, in the order the stores write them: the fallbacks that settled
 * (`fallback`, those the table records), retries, dead letters, and releases with a cause (an
 * outage's; a shutdown's release records none).
 */
export function failedAttempts(
  s: Settlement,
  fallback: NonNullable<Settlement['fallback']>,
): FailedAttempt[] {
  return [
    ...fallback.map((r): FailedAttempt => [r.id, 'fallback', r.errorClass, r.error]),
    ...s.retry.map((r): FailedAttempt => [r.id, 'retry', r.errorClass, r.error]),
    ...s.dead.map((r): FailedAttempt => [r.id, 'dead', r.errorClass, r.error]),
    ...s.release.flatMap((r): FailedAttempt[] =>
      r.error === null ? [] : [[r.id, 'outage', r.errorClass, r.error]],
    ),
  ];
}
