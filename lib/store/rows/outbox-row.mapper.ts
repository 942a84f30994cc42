import type { OutboxHeaders } from '../../message/outbox-message.interface';
import { parseBrokerAttributes } from '../../message/broker-attributes';
import type { ClaimedRecord, NewOutboxRow } from '../ports/outbox-store.port';
import { messageIdText } from './message-id-codec';
import { OUTBOX_HEADER_REDRIVE_DELAY } from '../../outbox.constants';
import { isRedriveLane, shownKeyOf } from './redrive-lane';

/** The columns every dialect's claim returns, with driver-dependent types. */
export interface ClaimedRow {
  id: string | number;
  /** The text (PostgreSQL, SQLite, CHAR(36)), or the 16 bytes of a MySQL BINARY(16) column. */
  message_id: string | Uint8Array;
  topic: string;
  message_key: string | null;
  event_type: string;
  payload: string;
  headers: string;
  attempts: number | string;
  /** A Date, text, or (PostgreSQL's claim) milliseconds since the epoch, with a fraction. */
  created_at: Date | string | number;
  age_ms: number | string;
  payload_encoding: string;
  content_type: string | null;
  /** Base64 text (PostgreSQL, MySQL/MariaDB) or the bytes themselves (SQLite). */
  payload_bytes: string | Uint8Array | ArrayBuffer | null;
  broker_attributes: string | null;
}

/**
 * Bytes as a store reads them back: base64 text from PostgreSQL and MySQL, a BLOB from SQLite
 * (a Buffer from better-sqlite3, an ArrayBuffer from libSQL's driver).
 */
export function storedBytes(value: string | Uint8Array | ArrayBuffer | null): Buffer {
  if (value === null) return Buffer.alloc(0);
  if (typeof value === 'string') return Buffer.from(value, 'base64');
  if (value instanceof ArrayBuffer) return Buffer.from(value);
  return Buffer.isBuffer(value)
    ? value
    : Buffer.from(value.buffer, value.byteOffset, value.byteLength);
}

const EMPTY_HEADERS: OutboxHeaders = Object.freeze({});

/**
 * A timestamp as the driver answered it: a Date, text, or milliseconds since the epoch (a
 * number: PostgreSQL's claim, which every port reads as one). SQLite and MySQL text is UTC
 * without a zone; PostgreSQL's text form (what MikroORM's driver answers) ends in an offset,
 * without minutes when they are 0 (`+00`). Fractions are cut to milliseconds: `Date` parsing is
 * only specified for those.
 */
export function toDate(value: Date | string | number): Date {
  if (value instanceof Date) return value;
  if (typeof value === 'number') {
    // Microseconds as a double's fraction of a millisecond are off by up to about 0.0003 (the
    // double's rounding, in this century): a time on a whole millisecond may read 0.9997 below
    // it. Half a microsecond of margin cuts it to the millisecond it is, as text parsing does.
    return new Date(Math.floor(value + 0.0005));
  }
  const match =
    /^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}(?::?\d{2})?)?$/.exec(
      value.trim(),
    );
  if (match === null) return new Date(value);
  const [, day, time, fraction, zone] = match;
  const ms = fraction === undefined ? '' : `.${fraction.slice(0, 3).padEnd(3, '0')}`;
  return new Date(`${day}T${time}${ms}${offset(zone)}`);
}

function offset(zone: string | undefined): string {
  if (zone === undefined || zone === 'Z') return 'Z';
  const digits = zone.slice(1).replace(':', '');
  return `${zone[0]}${digits.slice(0, 2)}:${digits.slice(2, 4).padEnd(2, '0')}`;
}

/** Maps a claimed row to a record, in claim (id) order. */
export function toClaimedRecords(rows: readonly ClaimedRow[]): ClaimedRecord[] {
  const records = rows.map(toClaimedRecord);
  return records.sort(compareIds);
}

/**
 * How long after its write a row fell due when that is where its age starts: a re-drive copy
 * spread by a rate (docs/operations.md), whose age counts from its due time so that the spread
 * never expires its own later copies. 0 for every other row (its age counts from its enqueue).
 */
function dueAfterMs(headers: OutboxHeaders): number {
  const delay = headers[OUTBOX_HEADER_REDRIVE_DELAY];
  if (delay === undefined) return 0;
  const ms = Number(delay);
  return Number.isFinite(ms) && ms > 0 ? ms : 0;
}

/**
 * One record, built as one object literal. Spreading a common part into a new object with more
 * properties after it (`{ ...common, payload }`) is many times slower on Node 20 than the
 * literal, and was the mapper's heaviest step in a CPU profile of a drain. (A spread of a
 * small literal inside one, as for `attributes`, is not that shape.) Binary payloads, rare,
 * still take that path.
 */
function toClaimedRecord(row: ClaimedRow): ClaimedRecord {
  const headers = row.headers === '{}' ? EMPTY_HEADERS : (JSON.parse(row.headers) as OutboxHeaders);
  if (!isRedriveLane(row.message_key)) return recordOf(row, row.message_key, headers);
  // A re-drive copy in a lane of its own (rows/redrive-lane.ts): its key shown, its lane kept.
  const shown = shownKeyOf(row.message_key, headers);
  return { ...recordOf(row, shown.key, shown.headers), lane: row.message_key };
}

function recordOf(row: ClaimedRow, key: string | null, headers: OutboxHeaders): ClaimedRecord {
  const record = {
    id: String(row.id),
    messageId: messageIdText(row.message_id),
    topic: row.topic,
    key,
    type: row.event_type,
    headers,
    attempts: Number(row.attempts),
    createdAt: toDate(row.created_at),
    ageMs: Math.max(0, Number(row.age_ms) - dueAfterMs(headers)),
    ...(row.broker_attributes === null
      ? {}
      : { attributes: parseBrokerAttributes(row.broker_attributes) }),
    payload: row.payload,
  };
  return row.payload_encoding === 'binary'
    ? {
        ...record,
        encoding: 'binary',
        payload: storedBytes(row.payload_bytes),
        contentType: row.content_type ?? 'application/octet-stream',
      }
    : record;
}

/** A dead row read for requeueing, as the dialects' re-insert statements bind it. */
export interface RequeuedRow {
  /** As the dialect's re-insert binds it (see `ClaimedRow.message_id`). */
  message_id: string | Uint8Array;
  topic: string;
  message_key: string | null;
  event_type: string;
  payload: string;
  headers: string;
  payload_encoding: string;
  content_type: string | null;
  /** As the dialect's re-insert binds it (base64 text on MySQL/MariaDB, a BLOB on SQLite). */
  payload_bytes: string | Uint8Array | ArrayBuffer | null;
  broker_attributes: string | null;
  created_at: string;
}

/** The bound values of one re-inserted row, in the re-insert column order. */
export function requeueValues(r: RequeuedRow): unknown[] {
  return [
    r.message_id,
    r.topic,
    r.message_key,
    r.event_type,
    r.payload,
    r.headers,
    r.payload_encoding,
    r.content_type,
    // libSQL reads a BLOB as an ArrayBuffer; bound back, it must be a Buffer.
    r.payload_bytes instanceof ArrayBuffer ? Buffer.from(r.payload_bytes) : r.payload_bytes,
    r.broker_attributes,
    r.created_at,
  ];
}

/** Whether message id `a` is after `b` (decimal strings of any length, compared as numbers). */
export function idAfter(a: string, b: string): boolean {
  return a.length !== b.length ? a.length > b.length : a > b;
}

/** Orders decimal id strings numerically without converting them to (lossy) numbers. */
export function compareIds(a: { id: string }, b: { id: string }): number {
  return a.id.length - b.id.length || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/** A stable 31-bit hash of a key (FNV-1a), for per-key locks. */
export function hashKey(key: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    hash ^= key.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 1) & 0x7fffffff;
}

/**
 * The distinct lock ids of `keys` (their `hashKey`, or its bucket out of `buckets`), ascending,
 * so that every locker takes them in one order. Sorted as a typed array, without a comparator:
 * a settle of 500 keys computes this once, and the Set, per-key arrays and comparator sort it
 * replaced took about 8 times as long (about 0.2 ms for 500 keys; the library's largest self
 * time in a CPU profile of a drain to Kafka).
 */
export function sortedKeyLocks(keys: readonly (string | null)[], buckets?: number): number[] {
  // hashKey is 31 bits, so every id (and bucket) fits an Int32Array.
  const ids = new Int32Array(keys.length);
  let n = 0;
  for (const key of keys) {
    if (key === null) continue;
    const hash = hashKey(key);
    ids[n++] = buckets === undefined ? hash : hash % buckets;
  }
  const sorted = ids.subarray(0, n).sort();
  const distinct: number[] = [];
  for (let i = 0; i < n; i++) {
    const id = sorted[i] as number;
    if (i === 0 || id !== sorted[i - 1]) distinct.push(id);
  }
  return distinct;
}

/**
 * The idempotent rows an `INSERT … RETURNING` did not write (their id was already in the
 * table), from the rows it returned (`{ id }` each).
 */
export function alreadyPresent(rows: readonly NewOutboxRow[], returned: unknown): string[] {
  const written = new Set(
    (Array.isArray(returned) ? (returned as { id?: unknown }[]) : []).map((r) => String(r.id)),
  );
  return rows
    .filter((r) => r.idempotent === true && !written.has(r.messageId))
    .map((r) => r.messageId);
}
