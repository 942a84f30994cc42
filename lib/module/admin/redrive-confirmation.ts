import { createHash } from 'node:crypto';
import { messageIdText } from '../../store/rows/message-id-codec';

/** One selected row as the confirmation identifies it: where it is, its row id, its message id. */
export interface RedriveIdentity {
  readonly src: string;
  readonly origin: number | string;
  readonly message_id: string | Uint8Array;
}

/** `<count>-<32 hex digits>`: the count stays readable, the digest tells equal counts apart. */
const CONFIRMATION = /^([0-9]{1,7})-([0-9a-f]{32})$/;

/**
 * The confirmation of one exact selection, in queue order: its count and a digest of each row's
 * table, row id and message id. A row cleaned and another delivered in its place give the same
 * count and another digest; the message id is in it because a row id alone could come back
 * (a table emptied and its counter reset).
 */
export function redriveConfirmationOf(rows: readonly RedriveIdentity[]): string {
  const hash = createHash('sha256');
  for (const row of rows) {
    hash.update(`${row.src}:${String(row.origin)}:${messageIdText(row.message_id)}\n`);
  }
  return `${rows.length}-${hash.digest('hex').slice(0, 32)}`;
}

/** The count a confirmation was made for, or undefined when `value` is not a confirmation. */
export function redriveConfirmationCount(value: unknown): number | undefined {
  if (typeof value !== 'string') return undefined;
  const match = CONFIRMATION.exec(value);
  return match === null ? undefined : Number(match[1]);
}
