import type { StatementRunner } from '../outbox-database';
import type { OutboxTableNames } from '../../internal/sql-identifier';

// Schema step 4: binary payloads and broker attributes. A JSON row leaves all four at their
// defaults, so the enqueue statements of JSON messages name none of them. A binary row keeps
// `payload` NOT NULL by holding the JSON text `null` there: the step only adds columns, which
// PostgreSQL 11+, MySQL 8.0.29+ and MariaDB 10.3+ do without rewriting the table.

/** The columns step 4 adds, in the order the statements name them. */
export const PAYLOAD_COLUMNS = [
  'payload_encoding',
  'content_type',
  'payload_bytes',
  'broker_attributes',
] as const;

/** Each column's type on one database: the bytes and the attributes differ. */
export interface PayloadColumnTypes {
  readonly text: (length: number) => string;
  readonly bytes: string;
  readonly json: string;
}

/** The column definitions, as CREATE TABLE and ALTER TABLE … ADD COLUMN take them. */
export function payloadColumnDefinitions(types: PayloadColumnTypes): string[] {
  return [
    `payload_encoding ${types.text(16)} NOT NULL DEFAULT 'json'`,
    `content_type ${types.text(255)} NULL`,
    `payload_bytes ${types.bytes} NULL`,
    `broker_attributes ${types.json} NULL`,
  ];
}

/**
 * A read that fails on a table without the step's columns (and reads nothing otherwise): the
 * bootstrap and `outbox schema status` probe.
 */
export function payloadColumnsProbe(n: OutboxTableNames): string {
  return `SELECT 1 FROM ${n.table} WHERE 1 = 0 AND ${PAYLOAD_COLUMNS.map((c) => `${c} IS NULL`).join(' AND ')}`;
}

/** The step's columns a table has, from the database's catalog (MySQL/MariaDB). */
export async function mysqlPresentPayloadColumns(
  run: StatementRunner,
  n: OutboxTableNames,
): Promise<Set<string>> {
  const params = n.schema === null ? [n.tableName] : [n.schema, n.tableName];
  const rows = (await run(
    `SELECT COLUMN_NAME AS name FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = ${n.schema === null ? 'DATABASE()' : '?'} AND TABLE_NAME = ?
  AND COLUMN_NAME IN (${PAYLOAD_COLUMNS.map(() => '?').join(', ')})`,
    [...params, ...PAYLOAD_COLUMNS],
  )) as { name?: unknown; NAME?: unknown }[];
  return new Set(rows.map((r) => String(r.name ?? r.NAME)));
}

/** The step's columns a table has, from SQLite's catalog. */
export async function sqlitePresentPayloadColumns(
  run: StatementRunner,
  n: OutboxTableNames,
): Promise<Set<string>> {
  const rows = (await run(
    `SELECT name FROM pragma_table_info(?) WHERE name IN (${PAYLOAD_COLUMNS.map(() => '?').join(', ')})`,
    [n.tableName, ...PAYLOAD_COLUMNS],
  )) as { name: string }[];
  return new Set(rows.map((r) => r.name));
}

/**
 * Whether the table has every payload column, by the probe (PostgreSQL). Outside a transaction
 * only: a failed probe aborts PostgreSQL's.
 */
export function hasPayloadColumns(
  run: (sql: string, params?: unknown[]) => Promise<unknown>,
  n: OutboxTableNames,
): Promise<boolean> {
  return run(payloadColumnsProbe(n)).then(
    () => true,
    () => false,
  );
}
