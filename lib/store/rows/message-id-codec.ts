/**
 * How a table stores message ids, and the one place they are converted at the edge between the
 * app (the canonical lowercase 8-4-4-4-12 text) and the database. PostgreSQL's `uuid` and
 * SQLite's text take and give the text; MySQL/MariaDB tables made since 0.3 store the UUID's 16
 * bytes in BINARY(16), and older ones the 36 characters in CHAR(36) (docs/outbox-table.md).
 */
export type MessageIdLayout = 'text' | 'binary';

/** A message id as a statement binds it: the text, or the UUID's 16 bytes. */
export type MessageIdParam = string | Buffer;

/** Binds the message ids of one table. Reading needs no codec: see `messageIdText`. */
export interface MessageIdCodec {
  readonly layout: MessageIdLayout;
  /** The value to bind for `id` (a checked, lowercase UUID); a plain function, passed around. */
  readonly param: (id: string) => MessageIdParam;
}

const HEX32 = /^[0-9a-f]{32}$/;

/** The 16 bytes of a UUID in its text form (hyphens optional, any case). */
export function messageIdBytes(id: string): Buffer {
  const hex = id.replace(/-/g, '').toLowerCase();
  // Buffer.from(…, 'hex') stops silently at the first bad digit: check first.
  if (!HEX32.test(hex)) throw new TypeError(`not a UUID: ${JSON.stringify(id)}`);
  return Buffer.from(hex, 'hex');
}

function uuidOfBytes(bytes: Uint8Array): string {
  const hex = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * A message id as any driver reads it back, as the canonical text: the UUID text itself
 * (PostgreSQL, SQLite, a CHAR(36) column), or the 16 bytes of a BINARY(16) column as a Buffer
 * (mysql2), another Uint8Array or an ArrayBuffer.
 */
export function messageIdText(value: unknown): string {
  if (typeof value === 'string') return value.toLowerCase();
  // Realm-proof checks: a test runner's sandbox (jest's) has Uint8Array and ArrayBuffer of its
  // own, which the driver's Buffers are not instances of.
  if (Object.prototype.toString.call(value) === '[object ArrayBuffer]')
    return uuidOfBytes(new Uint8Array(value as ArrayBuffer));
  if (ArrayBuffer.isView(value) && value.byteLength === 16)
    return uuidOfBytes(new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
  throw new TypeError(`not a stored message id: ${describe(value)}`);
}

function describe(value: unknown): string {
  if (ArrayBuffer.isView(value)) return `${value.byteLength} bytes`;
  return value === null ? 'null' : typeof value;
}

/** The ids of a table whose column holds the text (PostgreSQL, SQLite, CHAR(36)). */
export const TEXT_MESSAGE_IDS: MessageIdCodec = { layout: 'text', param: (id) => id };

/** The ids of a BINARY(16) column: bound as their 16 bytes, converted here, not in SQL. */
export const BINARY_MESSAGE_IDS: MessageIdCodec = { layout: 'binary', param: messageIdBytes };

export function messageIdCodec(layout: MessageIdLayout): MessageIdCodec {
  return layout === 'binary' ? BINARY_MESSAGE_IDS : TEXT_MESSAGE_IDS;
}
