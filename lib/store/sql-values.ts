import type { NewOutboxRow } from './outbox-store.port';

/**
 * A date as MySQL DATETIME(6) and SQLite's datetime text want it, in UTC: `2026-11-23 10:37:19.123`.
 * Both store timestamps without a zone, so the text must be UTC whatever the process's zone is.
 */
export function utcText(at: Date): string {
  return at.toISOString().replace('T', ' ').replace('Z', '');
}

/** One multi-row INSERT of the rows of an enqueue, with the values it binds, in row order. */
export interface InsertChunk {
  readonly rows: readonly NewOutboxRow[];
  /** Some row has a delay or a date: every row of the chunk binds both, the others as none. */
  readonly scheduled: boolean;
  /** Some row has a caller-given id: the statement leaves a row already present alone. */
  readonly idempotent: boolean;
  readonly params: unknown[];
}

/**
 * The rows of an enqueue as INSERT statements of at most `rowsPerStatement` rows each, for the
 * databases whose insert binds positional values (MySQL/MariaDB, SQLite): per row the message
 * id, topic, key, type, payload and headers, then, when the chunk is scheduled, the due date (as
 * UTC text) and the delay.
 */
export function insertChunks(
  rows: readonly NewOutboxRow[],
  rowsPerStatement: number,
): InsertChunk[] {
  const chunks: InsertChunk[] = [];
  for (let start = 0; start < rows.length; start += rowsPerStatement) {
    const chunk = rows.slice(start, start + rowsPerStatement);
    const scheduled = chunk.some((r) => r.availableAt !== null || r.delayMs !== null);
    const params: unknown[] = [];
    for (const r of chunk) {
      params.push(r.messageId, r.topic, r.key, r.type, r.payload, r.headers);
      if (scheduled)
        params.push(r.availableAt === null ? null : utcText(r.availableAt), r.delayMs ?? 0);
    }
    chunks.push({
      rows: chunk,
      scheduled,
      idempotent: chunk.some((r) => r.idempotent === true),
      params,
    });
  }
  return chunks;
}
