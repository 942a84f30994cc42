import type { OutboxTableNames } from '../../internal/sql-identifier';

// MySQL/MariaDB's binary collations compare PAD SPACE: 'k' = 'k ', so two keys (or topics, or
// types) that differ by trailing spaces would share one queue and one admin filter. The key,
// topic and type columns use a NO PAD binary collation instead, which each server names
// differently.

/** The columns compared by the claim, the key locks and the admin filters. */
const COLUMNS = [
  ['topic', 'VARCHAR(255)', 'NOT NULL'],
  ['message_key', 'VARCHAR(255)', 'NULL'],
  ['event_type', 'VARCHAR(255)', 'NOT NULL'],
] as const;

const MARIADB_NO_PAD = 'utf8mb4_nopad_bin';
const MYSQL_NO_PAD = 'utf8mb4_0900_bin';

/** The NO PAD binary utf8mb4 collation of the server whose `VERSION()` this is. */
export function mysqlNoPadCollation(version: string): string {
  return /mariadb/i.test(version) ? MARIADB_NO_PAD : MYSQL_NO_PAD;
}

/** $1 schema-less table name: the collation of each compared column, for the bootstrap check. */
export function mysqlColumnCollations(n: OutboxTableNames): string {
  return `SELECT COLUMN_NAME AS name, COLLATION_NAME AS collation FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = ${n.schema === null ? 'DATABASE()' : '?'} AND TABLE_NAME = ?
  AND COLUMN_NAME IN (${COLUMNS.map(([c]) => `'${c}'`).join(', ')})`;
}

/** One ALTER that moves the compared columns to `collation`, rows kept. */
export function mysqlUseNoPad(n: OutboxTableNames, collation: string): string {
  const modify = COLUMNS.map(
    ([name, type, nullable]) =>
      `MODIFY ${name} ${type} CHARACTER SET utf8mb4 COLLATE ${collation} ${nullable}`,
  );
  return `ALTER TABLE ${n.table} ${modify.join(', ')}`;
}

/**
 * The same ALTER for a migration written ahead of time (outboxTableDdl), which cannot ask the
 * server its version: the server picks its own collation's name and runs the ALTER as a
 * prepared statement, and runs nothing when every compared column has it already. Plain SQL
 * that MySQL 8 and MariaDB both run, statement by statement, in any migration tool.
 */
export function mysqlNoPadDdl(n: OutboxTableNames): string[] {
  // Names are checked identifiers (letters, digits, underscores), so they hold no quote.
  const schema = n.schema === null ? 'DATABASE()' : `'${n.schema}'`;
  // mysqlUseNoPad's ALTER with the collation spliced in by CONCAT from the session variable.
  const alter = mysqlUseNoPad(n, "', @outbox_no_pad, '");
  return [
    `SET @outbox_no_pad = IF(VERSION() LIKE '%mariadb%', '${MARIADB_NO_PAD}', '${MYSQL_NO_PAD}')`,
    `SET @outbox_no_pad_ddl = IF(EXISTS (SELECT 1 FROM information_schema.COLUMNS
  WHERE TABLE_SCHEMA = ${schema} AND TABLE_NAME = '${n.tableName}'
    AND COLUMN_NAME IN (${COLUMNS.map(([c]) => `'${c}'`).join(', ')}) AND COLLATION_NAME <> @outbox_no_pad),
  CONCAT('${alter}'), 'DO 0')`,
    'PREPARE outbox_no_pad FROM @outbox_no_pad_ddl',
    'EXECUTE outbox_no_pad',
    'DEALLOCATE PREPARE outbox_no_pad',
  ];
}

type Query = (sql: string, params?: unknown[]) => Promise<unknown>;

/** The compared columns whose collation is not `expected` (none on an up-to-date table). */
export async function mysqlPaddedColumns(
  query: Query,
  n: OutboxTableNames,
): Promise<{ expected: string; padded: string[] }> {
  const [row] = (await query('SELECT VERSION() AS version')) as { version: string }[];
  const expected = mysqlNoPadCollation(row?.version ?? '');
  const params = n.schema === null ? [n.tableName] : [n.schema, n.tableName];
  const columns = (await query(mysqlColumnCollations(n), params)) as {
    name: string;
    collation: string | null;
  }[];
  return {
    expected,
    padded: columns.filter((c) => c.collation !== expected).map((c) => c.name),
  };
}

/** Moves an existing table's compared columns to the NO PAD collation when they are not yet. */
export async function mysqlEnsureNoPad(query: Query, n: OutboxTableNames): Promise<void> {
  const { expected, padded } = await mysqlPaddedColumns(query, n);
  if (padded.length > 0) await query(mysqlUseNoPad(n, expected));
}
