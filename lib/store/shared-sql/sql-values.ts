import type { NewOutboxRow } from '../ports/outbox-store.port';

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
  /** Some row is binary or has attributes: every row of the chunk binds the step-4 columns. */
  readonly extended: boolean;
  readonly params: unknown[];
}

/**
 * The rows of an enqueue as INSERT statements of at most `rowsPerStatement` rows each, for the
 * databases whose insert binds positional values (MySQL/MariaDB, SQLite): per row the message
 * id (as `messageId` binds it), topic, key, type, payload and headers, then, when the chunk is extended, the encoding,
 * content type, bytes (as `bytes` binds them) and attributes, then, when the chunk is scheduled,
 * the due date (as UTC text) and the delay.
 */
export function insertChunks(
  rows: readonly NewOutboxRow[],
  rowsPerStatement: number,
  bytes: 'base64' | 'buffer' = 'base64',
  /** The message id as the table binds it (see message-id-codec.ts). */
  messageId: (id: string) => unknown = (id) => id,
): InsertChunk[] {
  const chunks: InsertChunk[] = [];
  for (let start = 0; start < rows.length; start += rowsPerStatement) {
    const chunk = rows.slice(start, start + rowsPerStatement);
    const scheduled = chunk.some((r) => r.availableAt !== null || r.delayMs !== null);
    const extended = chunk.some(isExtended);
    const params: unknown[] = [];
    for (const r of chunk) {
      params.push(messageId(r.messageId), r.topic, r.key, r.type, r.payload, r.headers);
      if (extended) {
        if (bytes === 'base64') params.push(...extendedValues(r));
        else
          params.push(
            r.binary === undefined ? 'json' : 'binary',
            r.binary?.contentType ?? null,
            r.binary?.bytes ?? null,
            r.attributes ?? null,
          );
      }
      if (scheduled)
        params.push(r.availableAt === null ? null : utcText(r.availableAt), r.delayMs ?? 0);
    }
    chunks.push({
      rows: chunk,
      scheduled,
      extended,
      idempotent: chunk.some((r) => r.idempotent === true),
      params,
    });
  }
  return chunks;
}

/** Whether a row needs the step-4 columns (binary payload, broker attributes) written. */
export function isExtended(r: NewOutboxRow): boolean {
  return r.binary !== undefined || r.attributes !== undefined;
}

/**
 * A row's step-4 values in column order: encoding, content type, the bytes as base64 text (every
 * SQL port binds text alike; the statement decodes it), the attributes' JSON text.
 */
export function extendedValues(
  r: NewOutboxRow,
): [string, string | null, string | null, string | null] {
  return r.binary === undefined
    ? ['json', null, null, r.attributes ?? null]
    : ['binary', r.binary.contentType, r.binary.bytes.toString('base64'), r.attributes ?? null];
}

/**
 * What a statement shape needs (its text, or its text and options), built once per shape: an
 * enqueue of one message would otherwise rebuild the same insert text on every call. Callers
 * key only shapes of bounded variety (one row or many, not every row count a batch may have).
 */
export function cachedStatement<T = string>(
  cache: Map<string, T>,
  shape: string,
  build: () => T,
): T {
  let text = cache.get(shape);
  if (text === undefined) {
    text = build();
    cache.set(shape, text);
  }
  return text;
}
