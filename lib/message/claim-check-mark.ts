import { OUTBOX_HEADER_CLAIM_CHECK_ID } from '../outbox.constants';
import type { NewOutboxRow } from './new-outbox-row';

/**
 * The claim check's decision, made at enqueue (docs/claim-check.md): a row whose payload is over
 * its type's threshold gets `x-outbox-claim-check-id`, its own message id, under which the
 * publisher stores the payload before sending a reference. Only the header is written: the row
 * keeps its payload, and nothing leaves the caller's transaction.
 */
export function markClaimChecks(
  rows: readonly NewOutboxRow[],
  thresholdFor: (eventType: string) => number | null,
): NewOutboxRow[] {
  return rows.map((row) => {
    const threshold = thresholdFor(row.type);
    if (threshold === null) return row;
    // A string's UTF-8 length is at most 3 bytes a character: most payloads are decided
    // without counting.
    const size =
      row.binary !== undefined
        ? row.binary.bytes.length
        : row.payload.length * 3 <= threshold
          ? 0
          : Buffer.byteLength(row.payload, 'utf8');
    if (size <= threshold) return row;
    const headers =
      row.headers === '{}'
        ? JSON.stringify({ [OUTBOX_HEADER_CLAIM_CHECK_ID]: row.messageId })
        : JSON.stringify({
            ...(JSON.parse(row.headers) as Record<string, string>),
            [OUTBOX_HEADER_CLAIM_CHECK_ID]: row.messageId,
          });
    return Object.assign({}, row, { headers });
  });
}
