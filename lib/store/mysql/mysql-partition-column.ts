import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { StatementRunner } from '../outbox-database';
import type { MessageIdLayout } from '../rows/message-id-codec';

// Schema step 9's column on MySQL/MariaDB (mysql.delivery-partitions-sql.ts), apart from the rest
// of the step: the message-id conversion (mysql-message-ids.ts) makes it again for the new
// layout, since its expression reads the id column.

/**
 * A message id as its canonical text (lower-case 8-4-4-4-12), from either layout: the partition
 * of an unkeyed message is then the one PostgreSQL gives it, and stays the same when the ids are
 * converted from one layout to the other.
 */
function idText(layout: MessageIdLayout): string {
  // A CHAR column read as it is depends on the PAD_CHAR_TO_FULL_LENGTH sql_mode, which MariaDB
  // refuses in a generated column; a UUID has no trailing spaces, so RTRIM changes nothing.
  return layout === 'binary'
    ? `LOWER(INSERT(INSERT(INSERT(INSERT(HEX(message_id), 21, 0, '-'), 17, 0, '-'), 13, 0, '-'), 9, 0, '-'))`
    : 'LOWER(RTRIM(message_id))';
}

/**
 * A row's partition: the first byte of the MD5 of its key (its UTF-8 bytes), or of its message
 * id's text when it has no key; PostgreSQL's value, computed by the server, so every writer
 * (any ORM, a hand-written INSERT) agrees, rows already there included.
 */
export function mysqlPartitionExpression(layout: MessageIdLayout): string {
  return `CONV(LEFT(MD5(COALESCE(message_key, ${idText(layout)})), 2), 16, 10)`;
}

/** The index an owner reads its partitions' pending rows through, in id order. */
export const mysqlPartitionIndexName = (n: OutboxTableNames): string =>
  `${n.tableName}_partition_idx`;

/**
 * `ADD KEY` of the partition index. MySQL has no partial index: it leads with the status, then
 * the id, so that a read walks the pending rows in id order from where it starts and stops at its
 * limit, taking each entry's partition from the index itself; led by the partition, a read of
 * many partitions (the log reader owns all 256) is as many ranges, whose rows are all sorted
 * before the first is answered.
 */
export function mysqlPartitionIndex(n: OutboxTableNames): string {
  return `ADD KEY ${n.quote(mysqlPartitionIndexName(n))} (status, id, delivery_partition)`;
}

/** `ADD COLUMN` and `ADD KEY` of the partition, for a table whose ids are stored as `layout`. */
export function mysqlPartitionColumn(n: OutboxTableNames, layout: MessageIdLayout): string {
  return `ADD COLUMN delivery_partition SMALLINT AS (${mysqlPartitionExpression(layout)}) STORED,
  ${mysqlPartitionIndex(n)}`;
}

/** What of the column and its index the outbox table has. */
export interface PartitionColumnPresent {
  readonly column: boolean;
  readonly index: boolean;
}

/** `DROP` clauses of what the table has of the column and its index. */
export function mysqlPartitionDrops(n: OutboxTableNames, has: PartitionColumnPresent): string[] {
  return [
    ...(has.index ? [`DROP INDEX ${n.quote(mysqlPartitionIndexName(n))}`] : []),
    ...(has.column ? ['DROP COLUMN delivery_partition'] : []),
  ];
}

/** What of the column and its index the table has (the catalog: no ADD COLUMN IF NOT EXISTS). */
export async function mysqlPartitionPresent(
  run: StatementRunner,
  n: OutboxTableNames,
): Promise<PartitionColumnPresent> {
  const where = `TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`;
  const columns = (await run(
    `SELECT 1 AS found FROM information_schema.COLUMNS WHERE ${where} AND COLUMN_NAME = 'delivery_partition'`,
    [n.schema, n.tableName],
  )) as unknown[];
  const indexes = (await run(
    `SELECT 1 AS found FROM information_schema.STATISTICS WHERE ${where} AND INDEX_NAME = ? LIMIT 1`,
    [n.schema, n.tableName, mysqlPartitionIndexName(n)],
  )) as unknown[];
  return { column: columns.length > 0, index: indexes.length > 0 };
}
