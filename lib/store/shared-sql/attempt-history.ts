/**
 * The attempt history: one row per failed publish attempt of a message, in `<table>_attempts`,
 * written by the store's settle in the same transaction as the failure it records (never on
 * delivery), keyed by message id so that a message moved to the end of its key keeps it, and
 * deleted with its message.
 */

/**
 * How many attempts of one message the history keeps: the latest ones. A message retried
 * without end (`retry.maxAttempts: Infinity`) would otherwise grow it forever.
 */
export const ATTEMPT_HISTORY_LIMIT = 50;

/** The history's columns, in the order the stores insert them. */
export const ATTEMPT_COLUMNS = 'message_id, attempt, outcome, locked_by, error_class, error';
