import type { DataSource, EntityManager } from 'typeorm';
import { typeormSqlPort, typeormSqlRunner } from '../orm/typeorm/typeorm.sql-port';
import { OutboxError } from '../errors/outbox.error';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { outboxDatabase, outboxDialectOf } from '../store/outbox-dialect';
import { INBOX_MAX_CONSUMER_BYTES, INBOX_MAX_MESSAGE_ID_BYTES } from './inbox.constants';
import type {
  InboxEntry,
  InboxHandler,
  InboxOutcome,
  InboxPurgeOptions,
  InboxTableOptions,
} from './inbox.interfaces';
import { InboxMessages } from './inbox.messages';
import { inboxTableNames } from './inbox-table';
import { InvalidInboxEntryError } from './invalid-inbox-entry.error';
import { runSerially } from './sqlite-transaction.queue';

function checkEntryField(
  field: 'messageId' | 'consumer',
  value: unknown,
  maxBytes: number,
): string {
  if (typeof value !== 'string' || value === '') {
    throw new InvalidInboxEntryError(field, 'it must be a non-empty string');
  }
  // PostgreSQL text cannot hold NUL.
  if (value.includes('\u0000')) {
    throw new InvalidInboxEntryError(field, 'it contains a NUL character');
  }
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes > maxBytes) {
    throw new InvalidInboxEntryError(field, `it is ${bytes} UTF-8 bytes, over ${maxBytes}`);
  }
  return value;
}

function isDataSourceLike(value: unknown): value is DataSource {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { transaction?: unknown }).transaction === 'function' &&
    typeof (value as { options?: { type?: unknown } }).options?.type === 'string'
  );
}

/**
 * The consumer side of at-least-once delivery: records each message id in an inbox table in the
 * same transaction as the handler's business writes, so "handle + mark handled" commits or rolls
 * back as one, and a redelivered message is skipped.
 *
 * Usable without Nest (`new Inbox(dataSource, { tableName })`); `InboxModule` provides it as
 * `InboxService`.
 */
export class Inbox {
  private readonly sharedConnection: boolean;
  private readonly insertSql: string;
  private readonly purgeSql: string;

  /**
   * @param dataSource the TypeORM DataSource whose database holds the inbox table; the handlers'
   *   business writes must go to the same database for the guarantee to hold.
   * @param options where the table is (validated as identifiers; refused, never escaped).
   */
  constructor(
    readonly dataSource: DataSource,
    options: InboxTableOptions = {},
  ) {
    if (!isDataSourceLike(dataSource)) {
      throw new OutboxOptionsError(InboxMessages.dataSourceRequired(), 'dataSource');
    }
    const { inbox } = outboxDatabase(dataSource.options.type);
    const names = inboxTableNames(outboxDialectOf(dataSource.options.type), options);
    this.sharedConnection = inbox.sharedConnection;
    this.insertSql = inbox.insert(names);
    this.purgeSql = inbox.purge(names);
  }

  /**
   * Runs `handler` once per (consumer, message id). In one transaction it inserts the id and, if
   * the id is new, runs the handler with the transaction's manager: both commit together. A
   * duplicate resolves to `{ handled: false }` without running the handler. When the handler
   * throws, the transaction rolls back, the id is not recorded, and the error propagates: nack
   * or let the message be redelivered, and the next delivery runs the handler again.
   *
   * Two deliveries of one id at the same time: the second one's insert waits for the first
   * transaction; it is a duplicate if the first commits and runs the handler if the first rolls
   * back (on SQLite the inbox runs its transactions one after another instead).
   *
   * @param target the inbox's DataSource (a transaction is opened), or an EntityManager of it.
   *   A manager inside an open transaction gets a savepoint, so a handler that throws undoes its
   *   own writes and the id even if the caller catches the error and commits. Inside a handler,
   *   pass its manager, never the DataSource, to nest another `handleOnce`.
   */
  async handleOnce<T>(
    target: DataSource | EntityManager,
    entry: InboxEntry,
    handler: InboxHandler<T>,
  ): Promise<InboxOutcome<T>> {
    const consumer = checkEntryField('consumer', entry.consumer, INBOX_MAX_CONSUMER_BYTES);
    const messageId = checkEntryField('messageId', entry.messageId, INBOX_MAX_MESSAGE_ID_BYTES);
    const manager = this.managerOf(target);
    // EntityManager.transaction() opens a transaction, or a savepoint when the manager's query
    // runner is already in one.
    const attempt = (): Promise<InboxOutcome<T>> =>
      manager.transaction(async (tx): Promise<InboxOutcome<T>> => {
        if (!(await this.record(tx, consumer, messageId))) return { handled: false };
        return { handled: true, result: await handler(tx) };
      });
    const joinsTransaction = manager.queryRunner?.isTransactionActive === true;
    return this.sharedConnection && !joinsTransaction
      ? runSerially(this.dataSource, attempt)
      : attempt();
  }

  /**
   * Deletes ids received more than `olderThanMs` ago (database clock), in batches; resolves to
   * the number deleted. A message redelivered after its id was purged is handled again, so keep
   * ids longer than the longest redelivery can take (broker retention, outbox retry window).
   */
  async purge(olderThanMs: number, options: InboxPurgeOptions = {}): Promise<number> {
    if (!Number.isFinite(olderThanMs) || olderThanMs < 0) {
      throw new OutboxOptionsError(
        InboxMessages.optionInvalid(
          'olderThanMs',
          `${String(olderThanMs)} is not a duration`,
          'Pass the age in milliseconds (0 or more) past which ids are deleted.',
        ),
        'olderThanMs',
      );
    }
    const batchSize = options.batchSize ?? 1_000;
    if (!Number.isInteger(batchSize) || batchSize < 1) {
      throw new OutboxOptionsError(
        InboxMessages.optionInvalid(
          'batchSize',
          `${String(batchSize)} is not a positive integer`,
          'Pass the number of rows to delete per statement, e.g. 1000.',
        ),
        'batchSize',
      );
    }
    const sql = typeormSqlPort(this.dataSource);
    const purgeAll = async (): Promise<number> => {
      let total = 0;
      for (;;) {
        // Small statements in autocommit: a long purge never holds locks across the table.
        const { affected } = await sql.query(this.purgeSql, [olderThanMs, batchSize]);
        total += affected;
        if (affected < batchSize) return total;
      }
    };
    return this.sharedConnection ? runSerially(this.dataSource, purgeAll) : purgeAll();
  }

  private managerOf(target: DataSource | EntityManager): EntityManager {
    const manager = target === this.dataSource ? this.dataSource.manager : target;
    if ((manager as Partial<EntityManager>).connection !== this.dataSource) {
      throw new OutboxError(InboxMessages.foreignManager());
    }
    return manager as EntityManager;
  }

  /** Inserts the id in the transaction of `tx`; false when it was already there. */
  private async record(tx: EntityManager, consumer: string, messageId: string): Promise<boolean> {
    const runner = tx.queryRunner;
    if (runner === undefined) throw new OutboxError('The inbox transaction has no query runner');
    const { affected } = await typeormSqlRunner(runner).query(this.insertSql, [
      consumer,
      messageId,
    ]);
    return affected === 1;
  }
}
