import { PAYLOAD_COLUMNS } from '../schema/payload-columns';

/**
 * The archive: with `cleaner.archive` on, the cleaner moves rows past their retention into
 * `<table>_archive` instead of deleting them, in the same statement or transaction as the
 * delete, so a row is in exactly one of the two tables at every moment. The archive has its own
 * id: a message id may come back to the outbox after its row was cleaned (a dedupe key is only
 * unique while its row is kept), so the same message may be archived twice.
 *
 * Its columns are the ones an audit or a replay needs, named here once: the outbox columns that
 * say what was sent, when, how often and how it ended, plus `outbox_id` (the row's id, which is
 * also its position in its key) and `archived_at`.
 */
export const ARCHIVED_COLUMNS = [
  'message_id',
  'topic',
  'message_key',
  'event_type',
  'payload',
  'headers',
  'status',
  'attempts',
  'last_error',
  'last_attempt_at',
  'created_at',
  'delivered_at',
  'dead_at',
  // A binary message's bytes, content type and broker attributes (schema step 4).
  ...PAYLOAD_COLUMNS,
] as const;

/** The archive's column list for an INSERT, `outbox_id` first. */
export const ARCHIVE_INSERT_COLUMNS = `outbox_id, ${ARCHIVED_COLUMNS.join(', ')}`;

/** The outbox columns that fill it, from a row source named `alias`. */
export function archivedValues(alias: string): string {
  return `${alias}.id, ${ARCHIVED_COLUMNS.map((c) => `${alias}.${c}`).join(', ')}`;
}
