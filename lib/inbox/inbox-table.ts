import type { DataSource } from 'typeorm';
import type { SqlPort } from '../store/ports/sql-port';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import {
  outboxDatabase,
  outboxDialectOf,
  type OutboxDialect,
} from '../store/schema/outbox-table-ddl';
import { assertIdentifier, outboxTableNames } from '../internal/sql-identifier';
import { INBOX_DEFAULT_TABLE } from './inbox.constants';
import type { InboxTableOptions } from './inbox.interfaces';
import type { InboxTableNames } from '../internal/sql-identifier';
import { InboxMessages } from './inbox.messages';
import { refuseUnknownInboxTableOptions } from './inbox-option-keys';

// The index name appends `_received_idx` (13 characters); PostgreSQL keeps 63.
const MAX_TABLE_NAME = 48;

// The outbox's identifier rule (assertIdentifier), reported with the inbox's wording.
function isSafeIdentifier(value: unknown): value is string {
  try {
    assertIdentifier(value, 'identifier');
    return true;
  } catch {
    return false;
  }
}

function checkIdentifier(value: unknown, option: string, maxLength: number): string {
  if (!isSafeIdentifier(value) || value.length > maxLength) {
    throw new OutboxOptionsError(
      InboxMessages.optionInvalid(
        option,
        `${JSON.stringify(value)} is not a safe SQL identifier of at most ${maxLength} characters`,
        InboxMessages.identifierFix(maxLength),
      ),
      option,
    );
  }
  return value;
}

/** Validates the table options (throws `OutboxOptionsError`) and quotes the names once. */
export function inboxTableNames(
  dialect: OutboxDialect,
  options: InboxTableOptions = {},
): InboxTableNames {
  const tableName = checkIdentifier(
    options.tableName ?? INBOX_DEFAULT_TABLE,
    'tableName',
    MAX_TABLE_NAME,
  );
  const schema =
    options.schema === undefined ? null : checkIdentifier(options.schema, 'schema', 63);
  const database = outboxDatabase(dialect);
  const names = outboxTableNames(tableName, database.schemas ? schema : null, database.quoting);
  return {
    table: names.table,
    index: names.quote(`${tableName}_received_idx`),
    sequenceTable: names.qualify(`${tableName}_seq`),
    schema: names.schema,
    quote: names.quote,
  };
}

/** The statements that create the inbox table and its index on one dialect. */
export function inboxTableDdl(dialect: OutboxDialect, options: InboxTableOptions = {}): string[] {
  refuseUnknownInboxTableOptions('inboxTableDdl()', options);
  const { inbox } = outboxDatabase(dialect);
  const names = inboxTableNames(dialect, options);
  return [...inbox.createTable(names), ...inbox.sequence.createTable(names)];
}

/** The statements that drop the inbox table on one dialect. */
export function inboxTableDropDdl(
  dialect: OutboxDialect,
  options: InboxTableOptions = {},
): string[] {
  refuseUnknownInboxTableOptions('inboxTableDropDdl()', options);
  const { inbox } = outboxDatabase(dialect);
  const names = inboxTableNames(dialect, options);
  return [...inbox.sequence.dropTable(names), ...inbox.dropTable(names)];
}

/** Creates the inbox table if it does not exist, e.g. in tests or at the start of a sample app. */
export async function ensureInboxTable(
  dataSource: DataSource,
  options: InboxTableOptions = {},
): Promise<void> {
  refuseUnknownInboxTableOptions('ensureInboxTable()', options);
  for (const sql of inboxTableDdl(outboxDialectOf(dataSource.options.type), options)) {
    await dataSource.query(sql);
  }
}

/**
 * Creates the inbox table if it does not exist through any connection's SQL port
 * (`pgOutbox(pool).sql`, `prismaOutbox(prisma).sql`, …), for apps without TypeORM.
 */
export async function createInboxTable(
  sql: SqlPort,
  options: InboxTableOptions = {},
): Promise<void> {
  refuseUnknownInboxTableOptions('createInboxTable()', options);
  for (const statement of inboxTableDdl(outboxDialectOf(sql.databaseType), options)) {
    await sql.query(statement);
  }
}
