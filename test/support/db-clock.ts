import type { DataSource } from 'typeorm';
import { messageIdBytes, messageIdText } from '../../lib/store/rows/message-id-codec';

// Reads of the outbox table measured on the database's own clock (leases and due times are
// written with it, so the tests must judge them with it too). Test tables only: the names are
// not user input.

type Dialect = 'postgres' | 'mariadb' | 'sqlite';

function dialectOf(ds: DataSource): Dialect {
  const type = ds.options.type;
  if (type === 'postgres') return 'postgres';
  return type === 'mariadb' || type === 'mysql' ? 'mariadb' : 'sqlite';
}

const quote = (d: Dialect, name: string): string => (d === 'mariadb' ? `\`${name}\`` : `"${name}"`);
const param = (d: Dialect): string => (d === 'postgres' ? '$1' : '?');
const messageIdColumn = (d: Dialect): string =>
  d === 'postgres' ? 'message_id::text' : 'message_id';
const nowExpression = (d: Dialect): string =>
  d === 'postgres' ? 'now()' : d === 'mariadb' ? 'UTC_TIMESTAMP(6)' : "'now'";

/** A timestamp expression as ms since the epoch, on the database's own clock. */
function epochMs(d: Dialect, expression: string): string {
  switch (d) {
    case 'postgres':
      return `(extract(epoch FROM ${expression}) * 1000)`;
    case 'mariadb':
      return `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ${expression}) / 1000)`;
    default:
      return `((julianday(${expression}) - 2440587.5) * 86400000.0)`;
  }
}

/** Milliseconds from now until the timestamp column (negative once past), database clock. */
function msUntil(d: Dialect, column: string): string {
  switch (d) {
    case 'postgres':
      return `extract(epoch FROM (${column} - now())) * 1000`;
    case 'mariadb':
      return `TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), ${column}) / 1000`;
    default:
      return `(julianday(${column}) - julianday('now')) * 86400000.0`;
  }
}

/** The one value `sql` selects (as `v`), or `ifNull` when there is no row or it is NULL. */
async function valueOf(
  ds: DataSource,
  sql: string,
  params: unknown[],
  ifNull: number,
): Promise<number> {
  const [row] = await ds.query<{ v: string | number | null }[]>(sql, params);
  return row?.v === undefined || row.v === null ? ifNull : Number(row.v);
}

/** `expression` of the row of `messageId`, as a number. */
function ofMessage(ds: DataSource, table: string, messageId: string, expression: string) {
  const d = dialectOf(ds);
  return valueOf(
    ds,
    `SELECT ${expression} AS v FROM ${quote(d, table)} WHERE message_id = ${param(d)}`,
    // As the table stores it: 16 bytes on MySQL/MariaDB (BINARY(16)).
    [d === 'mariadb' ? messageIdBytes(messageId) : messageId],
    Number.NaN,
  );
}

/** Milliseconds until the message is due, on the database clock. */
export function dueInMs(ds: DataSource, table: string, messageId: string): Promise<number> {
  return ofMessage(ds, table, messageId, msUntil(dialectOf(ds), 'available_at'));
}

/** When the message is next due (`available_at`), in ms since the epoch, database clock. */
export function dueAtMs(ds: DataSource, table: string, messageId: string): Promise<number> {
  return ofMessage(ds, table, messageId, epochMs(dialectOf(ds), 'available_at'));
}

/** The database clock now, in ms since the epoch. */
export function dbNowMs(ds: DataSource): Promise<number> {
  const d = dialectOf(ds);
  return valueOf(ds, `SELECT ${epochMs(d, nowExpression(d))} AS v`, [], Number.NaN);
}

/** Milliseconds until the last lease held by `owner` expires (negative once all have). */
export function leaseLeftMs(ds: DataSource, table: string, owner: string): Promise<number> {
  const d = dialectOf(ds);
  return valueOf(
    ds,
    `SELECT MAX(${epochMs(d, 'locked_until')}) - ${epochMs(d, nowExpression(d))} AS v FROM ${quote(d, table)} WHERE locked_by = ${param(d)}`,
    [owner],
    Number.NEGATIVE_INFINITY,
  );
}

/** Age of the most recently delivered row, on the database clock. */
export function youngestDeliveredAgeMs(ds: DataSource, table: string): Promise<number> {
  const d = dialectOf(ds);
  return valueOf(
    ds,
    `SELECT ${epochMs(d, nowExpression(d))} - MAX(${epochMs(d, 'delivered_at')}) AS v FROM ${quote(d, table)} WHERE status = 'delivered'`,
    [],
    Number.NaN,
  );
}

/** The pending rows leased by `owner`: message id and milliseconds left, database clock. */
export async function leasesHeldBy(
  ds: DataSource,
  table: string,
  owner: string,
): Promise<{ messageId: string; remainingMs: number }[]> {
  const d = dialectOf(ds);
  const rows = await ds.query<{ message_id: string; remaining: string | number }[]>(
    `SELECT ${messageIdColumn(d)} AS message_id, ${msUntil(d, 'locked_until')} AS remaining FROM ${quote(d, table)} WHERE locked_by = ${param(d)} AND status = 'pending'`,
    [owner],
  );
  return rows.map((r) => ({
    messageId: messageIdText(r.message_id),
    remainingMs: Number(r.remaining),
  }));
}

/**
 * Moves a timestamp column of every row of `status` `seconds` into the past, so a spec can put
 * rows beyond a retention of minutes without waiting for it.
 */
export async function ageRows(
  ds: DataSource,
  table: string,
  status: 'delivered' | 'dead',
  seconds: number,
): Promise<void> {
  const d = dialectOf(ds);
  const column = status === 'delivered' ? 'delivered_at' : 'dead_at';
  const aged =
    d === 'postgres'
      ? `${column} - ${seconds} * interval '1 second'`
      : d === 'mariadb'
        ? `${column} - INTERVAL ${seconds} SECOND`
        : `strftime('%Y-%m-%d %H:%M:%f', ${column}, '-${seconds} seconds')`;
  await ds.query(`UPDATE ${quote(d, table)} SET ${column} = ${aged} WHERE status = '${status}'`);
}
