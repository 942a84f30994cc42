import { OutboxMessageIdLayoutError } from '../../errors/outbox-message-id-layout.error';
import { OutboxMessages, type OutboxTableRef } from '../../outbox.messages';
import {
  messageIdCodec,
  TEXT_MESSAGE_IDS,
  type MessageIdCodec,
  type MessageIdLayout,
} from '../rows/message-id-codec';
import type { OutboxDatabase, StatementRunner } from '../outbox-database';
import type { OutboxTableNames } from '../../internal/sql-identifier';

/**
 * The message-id layout of tables made beside an existing outbox table (attempt history,
 * archive, guard): the table's own, so a table made before binary ids keeps working unchanged;
 * binary for a new one. Undefined where the database has one layout.
 */
export async function layoutForNewTables(
  database: OutboxDatabase,
  run: StatementRunner,
  n: OutboxTableNames,
): Promise<MessageIdLayout | undefined> {
  if (database.schema.messageIdLayout === undefined) return undefined;
  return (await database.schema.messageIdLayout(run, n)).table ?? 'binary';
}

/**
 * How the store binds the table's message ids, read from the catalog; refuses, saying what to
 * do, a column of another type or tables left in two layouts.
 */
export async function messageIdCodecOf(
  layoutOf: OutboxDatabase['schema']['messageIdLayout'],
  run: StatementRunner,
  n: OutboxTableNames,
  ref: OutboxTableRef,
): Promise<MessageIdCodec> {
  if (layoutOf === undefined) return TEXT_MESSAGE_IDS;
  const { table, problem } = await layoutOf(run, n);
  if (problem?.kind === 'unsupported') {
    throw new OutboxMessageIdLayoutError(
      OutboxMessages.messageIdColumnUnsupported(problem.table, problem.detail),
      problem.table,
      problem.detail,
    );
  }
  if (problem?.kind === 'mixed') {
    throw new OutboxMessageIdLayoutError(
      OutboxMessages.messageIdLayoutMixed(n.table, problem.detail, ref),
      n.table,
      'mixed',
    );
  }
  // A missing table fails the bootstrap's own probe; binary is what migrate would make.
  return messageIdCodec(table ?? 'binary');
}
