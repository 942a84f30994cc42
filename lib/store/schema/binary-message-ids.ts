import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { refuseUnknownCallOptions } from '../../internal/known-keys';
import { OutboxMessages } from '../../outbox.messages';
import type { MessageIdConversion } from '../outbox-database';
import {
  outboxDatabase,
  outboxDialectOf,
  tableNamesFor,
  type OutboxTableOptions,
} from './outbox-table-ddl';
import type { SqlPort } from '../ports/sql-port';

/** Which outbox table's ids `migrateOutboxToBinaryIds` converts. */
export type OutboxBinaryIdsOptions = Pick<OutboxTableOptions, 'tableName' | 'schema'>;

const BINARY_IDS_KEYS = {
  '': { tableName: true, schema: true } satisfies Record<keyof OutboxBinaryIdsOptions, true>,
} as const;

/** Refuses, with `OutboxOptionsError`, a key of `OutboxBinaryIdsOptions` that `subject` does not read. */
export function refuseUnknownBinaryIdsOptions(subject: string, options: unknown): void {
  refuseUnknownCallOptions(subject, options, BINARY_IDS_KEYS);
}

/**
 * Converts the message ids of a MySQL/MariaDB outbox table made before 0.3 from CHAR(36) to
 * BINARY(16) in place, every row kept, with its attempt history, archive and (partitioned
 * layout) guard: per table, a new column filled with `UNHEX(REPLACE(message_id, '-', ''))`, then
 * one ALTER that swaps it in and makes its indexes again. Tables already binary are skipped, so
 * it also finishes an interrupted run. A planned operation: it rewrites each table under a
 * metadata lock, and the app must be stopped while it runs, since a running process keeps
 * binding ids as the layout it read at its start (docs/outbox-table.md, "Message ids on MySQL
 * and MariaDB"). Refuses PostgreSQL and SQLite, whose ids need no conversion.
 *
 * @example await migrateOutboxToBinaryIds(mysql2Outbox(pool).sql, { tableName: 'outbox' });
 */
export async function migrateOutboxToBinaryIds(
  sql: SqlPort,
  options: OutboxBinaryIdsOptions = {},
): Promise<MessageIdConversion> {
  refuseUnknownBinaryIdsOptions('migrateOutboxToBinaryIds()', options);
  const dialect = outboxDialectOf(sql.databaseType);
  const database = outboxDatabase(dialect);
  if (database.schema.convertMessageIds === undefined) {
    throw new OutboxOptionsError(OutboxMessages.binaryIdsUnsupported(dialect), 'dataSource');
  }
  return database.schema.convertMessageIds(
    async (statement, params) => (await sql.query(statement, params)).rows,
    tableNamesFor(dialect, options),
    'binary',
  );
}
