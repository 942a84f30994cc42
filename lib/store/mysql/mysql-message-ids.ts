import { OutboxMessageIdLayoutError } from '../../errors/outbox-message-id-layout.error';
import { OutboxMessages } from '../../outbox.messages';
import type { MessageIdLayout } from '../rows/message-id-codec';
import type {
  MessageIdConversion,
  MessageIdLayoutReport,
  StatementRunner,
} from '../outbox-database';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import {
  mysqlPartitionColumn,
  mysqlPartitionDrops,
  mysqlPartitionPresent,
} from './mysql-partition-column';

// Message ids on MySQL/MariaDB: BINARY(16) since 0.3 (the UUID's bytes: 16 bytes a row and in
// every index over it instead of 36), CHAR(36) CHARACTER SET ascii before. Which one a table has
// is read from the catalog at bootstrap, and the store binds ids to match (message-id-codec.ts).
// The conversion below rewrites a table in place, keeping every row.

/** The column type of each layout, as the DDL writes it. */
export function mysqlMessageIdType(layout: MessageIdLayout): string {
  return layout === 'binary' ? 'BINARY(16)' : 'CHAR(36) CHARACTER SET ascii';
}

/** Where a conversion writes the new ids before swapping the columns; left by an interrupted one. */
const STAGING = 'message_id_new';

type Role = 'outbox' | 'attempts' | 'archive' | 'ids';

/** The tables that hold message ids, unquoted, by role. */
function idTables(n: OutboxTableNames): Record<Role, string> {
  return {
    outbox: n.tableName,
    attempts: `${n.tableName}_attempts`,
    archive: `${n.tableName}_archive`,
    ids: `${n.tableName}_ids`,
  };
}

/** One table's message id column as the catalog describes it. */
interface IdColumn {
  readonly role: Role;
  /** Unquoted. */
  readonly table: string;
  readonly layout: MessageIdLayout | null;
  /** As SQL would write it: `char(36)`, `binary(16)`, `varchar(64)`. */
  readonly columnType: string;
  /** An interrupted conversion left its staging column. */
  readonly staging: boolean;
}

// Catalog values are text; some ports answer them as bytes (a Buffer), which decode alike.
const text = (v: unknown): string =>
  typeof v === 'string' ? v : Buffer.isBuffer(v) ? v.toString('utf8') : '';
const lower = (v: unknown): string => text(v).toLowerCase();

/** Rows of information_schema with their keys in lower case (some ports answer upper case). */
function lowerKeys(rows: unknown): Record<string, unknown>[] {
  return (Array.isArray(rows) ? (rows as Record<string, unknown>[]) : []).map((r) =>
    Object.fromEntries(Object.entries(r).map(([k, v]) => [k.toLowerCase(), v])),
  );
}

function schemaFilter(n: OutboxTableNames): { sql: string; params: string[] } {
  return n.schema === null ? { sql: 'DATABASE()', params: [] } : { sql: '?', params: [n.schema] };
}

/** The message id column of each id table that exists. */
async function idColumns(run: StatementRunner, n: OutboxTableNames): Promise<IdColumn[]> {
  const tables = idTables(n);
  const schema = schemaFilter(n);
  const rows = lowerKeys(
    await run(
      `SELECT TABLE_NAME AS tbl, COLUMN_NAME AS col, DATA_TYPE AS type,
  CHARACTER_MAXIMUM_LENGTH AS len
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = ${schema.sql} AND TABLE_NAME IN (?, ?, ?, ?)
  AND COLUMN_NAME IN ('message_id', '${STAGING}')`,
      [...schema.params, ...Object.values(tables)],
    ),
  );
  const found: IdColumn[] = [];
  for (const [role, table] of Object.entries(tables) as [Role, string][]) {
    const of = rows.filter((r) => lower(r.tbl) === table.toLowerCase());
    const column = of.find((r) => lower(r.col) === 'message_id');
    if (column === undefined) continue;
    const type = lower(column.type);
    const length = column.len === null ? null : Number(column.len);
    found.push({
      role,
      table,
      layout:
        type === 'binary' && length === 16
          ? 'binary'
          : type === 'char' && length === 36
            ? 'text'
            : null,
      columnType: length === null ? type : `${type}(${length})`,
      staging: of.some((r) => lower(r.col) === STAGING),
    });
  }
  return found;
}

const describeLayout = (c: IdColumn): string =>
  c.layout === 'binary' ? 'BINARY(16)' : c.layout === 'text' ? 'CHAR(36)' : c.columnType;

/**
 * How the outbox table and the tables beside it (attempt history, archive, the partitioned
 * layout's guard) store message ids. Read only.
 */
export async function mysqlMessageIdLayout(
  run: StatementRunner,
  n: OutboxTableNames,
): Promise<MessageIdLayoutReport> {
  const columns = await idColumns(run, n);
  const outbox = columns.find((c) => c.role === 'outbox');
  const table = outbox?.layout ?? null;
  const odd = columns.find((c) => c.layout === null);
  if (odd !== undefined) {
    return {
      table,
      problem: {
        kind: 'unsupported',
        table: n.qualify(odd.table),
        detail: odd.columnType,
      },
    };
  }
  const interrupted = columns.find((c) => c.staging);
  if (interrupted !== undefined || columns.some((c) => c.layout !== table)) {
    return {
      table,
      problem: {
        kind: 'mixed',
        table: n.table,
        detail:
          (interrupted === undefined
            ? ''
            : `a conversion of ${interrupted.table} did not finish: its ${STAGING} column is there; `) +
          columns.map((c) => `${c.table}.message_id is ${describeLayout(c)}`).join(', '),
      },
    };
  }
  return { table, problem: null };
}

/** An index over the message id, to drop and make again around the column swap. */
interface IdIndex {
  readonly name: string;
  readonly unique: boolean;
  readonly columns: readonly string[];
}

async function indexesOver(
  run: StatementRunner,
  n: OutboxTableNames,
  table: string,
): Promise<IdIndex[]> {
  const schema = schemaFilter(n);
  const rows = lowerKeys(
    await run(
      `SELECT INDEX_NAME AS name, NON_UNIQUE AS non_unique, COLUMN_NAME AS col
FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = ${schema.sql} AND TABLE_NAME = ?
ORDER BY INDEX_NAME, SEQ_IN_INDEX`,
      [...schema.params, table],
    ),
  );
  const byName = new Map<string, { unique: boolean; columns: string[] }>();
  for (const r of rows) {
    const name = text(r.name);
    const entry = byName.get(name) ?? { unique: Number(r.non_unique) === 0, columns: [] };
    entry.columns.push(text(r.col));
    byName.set(name, entry);
  }
  return [...byName]
    .filter(([, i]) => i.columns.some((c) => c.toLowerCase() === 'message_id'))
    .map(([name, i]) => ({ name, ...i }));
}

/** `AFTER <column>` (or `FIRST`): where message_id stands, so the swap keeps the column order. */
async function positionOf(
  run: StatementRunner,
  n: OutboxTableNames,
  table: string,
): Promise<string> {
  const schema = schemaFilter(n);
  const rows = lowerKeys(
    await run(
      `SELECT COLUMN_NAME AS col FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = ${schema.sql} AND TABLE_NAME = ? AND COLUMN_NAME <> '${STAGING}'
ORDER BY ORDINAL_POSITION`,
      [...schema.params, table],
    ),
  );
  const names = rows.map((r) => text(r.col));
  const at = names.findIndex((c) => c.toLowerCase() === 'message_id');
  const before = at > 0 ? names[at - 1] : undefined;
  return before === undefined ? 'FIRST' : `AFTER ${n.quote(before)}`;
}

/** The new column's value from the old one. */
function convertedValue(to: MessageIdLayout): string {
  return to === 'binary'
    ? `UNHEX(REPLACE(message_id, '-', ''))`
    : `LOWER(INSERT(INSERT(INSERT(INSERT(HEX(message_id), 9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-'))`;
}

/** Rows whose id the conversion could not carry over (not a UUID): counted before any change. */
function unconvertible(table: string, from: MessageIdLayout): string {
  return from === 'text'
    ? `SELECT COUNT(*) AS n FROM ${table} WHERE message_id NOT REGEXP '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'`
    : `SELECT COUNT(*) AS n FROM ${table} WHERE LENGTH(message_id) <> 16`;
}

/**
 * Converts the message ids of the outbox table and the tables beside it to `to` in place, every
 * row kept, each table in three statements: add the new column, fill it from the old one, then
 * one ALTER that drops the old column and its indexes, renames the new one into its place and
 * makes the indexes again. A run that was interrupted is finished by running it again (tables
 * already converted are skipped). Nothing is changed when some id could not be carried over.
 */
export async function mysqlConvertMessageIds(
  run: StatementRunner,
  n: OutboxTableNames,
  to: MessageIdLayout,
): Promise<MessageIdConversion> {
  const columns = await idColumns(run, n);
  if (!columns.some((c) => c.role === 'outbox')) {
    throw new OutboxMessageIdLayoutError(
      OutboxMessages.messageIdConversionMissing(n.table),
      n.table,
      'missing',
    );
  }
  const odd = columns.find((c) => c.layout === null);
  if (odd !== undefined) {
    throw new OutboxMessageIdLayoutError(
      OutboxMessages.messageIdColumnUnsupported(n.qualify(odd.table), odd.columnType),
      n.qualify(odd.table),
      odd.columnType,
    );
  }
  const todo = columns.filter((c) => c.layout !== to || c.staging);
  // All checked before the first change: a conversion either runs through or changes nothing.
  for (const c of todo) {
    if (c.layout === to) continue;
    const [row] = lowerKeys(await run(unconvertible(n.qualify(c.table), c.layout ?? 'text')));
    const bad = Number(row?.n ?? 0);
    if (bad > 0) {
      throw new OutboxMessageIdLayoutError(
        OutboxMessages.messageIdsUnconvertible(n.qualify(c.table), bad, describeLayout(c)),
        n.qualify(c.table),
        describeLayout(c),
      );
    }
  }
  const converted: string[] = [];
  for (const c of todo) {
    const table = n.qualify(c.table);
    const type = mysqlMessageIdType(to);
    if (c.layout === to) {
      // Interrupted after the swap cannot happen (the swap is one ALTER): only the staging
      // column of a run that stopped before it is left, and dropped.
      await run(`ALTER TABLE ${table} DROP COLUMN ${STAGING}`);
      continue;
    }
    if (!c.staging) await run(`ALTER TABLE ${table} ADD COLUMN ${STAGING} ${type} NULL`);
    await run(`UPDATE ${table} SET ${STAGING} = ${convertedValue(to)}`);
    const indexes = await indexesOver(run, n, c.table);
    const position = await positionOf(run, n, c.table);
    // Step 9's partition is generated from the id column: dropped with it and made again from
    // the new one in the same ALTER, each row keeping its partition (the id's text either way).
    const partition =
      c.role === 'outbox' ? await mysqlPartitionPresent(run, n) : { column: false, index: false };
    const key = (i: IdIndex): string =>
      i.name === 'PRIMARY'
        ? `PRIMARY KEY (${i.columns.join(', ')})`
        : `${i.unique ? 'UNIQUE ' : ''}KEY ${n.quote(i.name)} (${i.columns.join(', ')})`;
    await run(
      `ALTER TABLE ${table} ${[
        ...mysqlPartitionDrops(n, partition),
        ...indexes.map((i) =>
          i.name === 'PRIMARY' ? 'DROP PRIMARY KEY' : `DROP INDEX ${n.quote(i.name)}`,
        ),
        'DROP COLUMN message_id',
        `CHANGE COLUMN ${STAGING} message_id ${type} NOT NULL ${position}`,
        ...indexes.map((i) => `ADD ${key(i)}`),
        ...(partition.column ? [mysqlPartitionColumn(n, to)] : []),
      ].join(',\n  ')}`,
    );
    converted.push(table);
  }
  return { layout: to, converted };
}
