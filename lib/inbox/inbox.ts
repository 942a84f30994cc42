import type { DataSource, EntityManager } from 'typeorm';
import { typeormSqlPort, typeormSqlRunner } from '../typeorm/typeorm.sql-port';
import { OutboxError } from '../errors/outbox.error';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxTransactionRequiredError } from '../errors/outbox-transaction-required.error';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import type { SqlPort, SqlRunner } from '../store/ports/sql-port';
import { outboxDatabase, outboxDialectOf } from '../store/schema/outbox-table-ddl';
import type { InboxRecorder } from '../store/outbox-database';
import { checkSequenced, compareSequence, resolveSequenceOptions } from './sequence-check';
import type { ResolvedSequenceOptions } from './sequence-check';
import { SequenceGapError } from './sequence-gap.error';
import type { SequenceCheck, SequencedMessage } from './sequence.interfaces';
import { INBOX_MAX_CONSUMER_BYTES, INBOX_MAX_MESSAGE_ID_BYTES } from './inbox.constants';
import type {
  InboxEntry,
  InboxHandler,
  InboxOptions,
  InboxOutcome,
  InboxPurgeOptions,
} from './inbox.interfaces';
import { InboxMessages } from './inbox.messages';
import { inboxTableNames } from './inbox-table';
import { InvalidInboxEntryError } from './invalid-inbox-entry.error';
import {
  refuseUnknownEntryKeys,
  refuseUnknownInboxOptions,
  refuseUnknownPurgeOptions,
} from './inbox-option-keys';
import { runSerially } from './sqlite-transaction.queue';
import { GapRepairAsker } from './gap-repair-asker';

/** How often a held message looks for its predecessor. */
const HOLD_POLL_MS = 25;

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

function isConnectionLike(value: unknown): value is OutboxConnection<unknown> {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { join?: unknown }).join === 'function' &&
    typeof (value as { sql?: { databaseType?: unknown } }).sql?.databaseType === 'string'
  );
}

/**
 * The consumer side of at-least-once delivery: records each message id in an inbox table in the
 * same transaction as the handler's business writes, so "handle + mark handled" commits or rolls
 * back as one, and a redelivered message is skipped.
 *
 * Usable without Nest (`new Inbox(dataSource, { tableName })`); `InboxModule` provides it as
 * `InboxService`. Without TypeORM, build it on your library's outbox connection
 * (`new Inbox(pgOutbox(pool))`, `prismaOutbox(prisma)`, …) and call `recordOnce(tx, entry)` in
 * your own transaction; `Tx` is then that library's transaction handle.
 */
export class Inbox<Tx = EntityManager> {
  private readonly source: DataSource | undefined;
  private readonly connection: OutboxConnection<Tx> | undefined;
  private readonly sql: SqlPort;
  private readonly sharedConnection: boolean;
  private readonly insertSql: string;
  private readonly recorder: InboxRecorder;
  private readonly purgeSql: string;
  private readonly sequence: ResolvedSequenceOptions;
  private readonly repair: GapRepairAsker | null;
  private readonly sequenceSql: {
    seed: string | undefined;
    read: string;
    peek: string;
    write: string;
  };

  /**
   * @param source the TypeORM DataSource whose database holds the inbox table, or the outbox
   *   connection of your database library; the handlers' business writes must go to the same
   *   database for the guarantee to hold.
   * @param options where the table is (validated as identifiers; refused, never escaped).
   */
  constructor(source: DataSource | OutboxConnection<Tx>, options: InboxOptions = {}) {
    refuseUnknownInboxOptions(options);
    if (isDataSourceLike(source)) {
      this.source = source;
      this.sql = typeormSqlPort(source);
    } else if (isConnectionLike(source)) {
      this.connection = source;
      this.sql = source.sql;
    } else {
      throw new OutboxOptionsError(InboxMessages.dataSourceRequired(), 'dataSource');
    }
    const { inbox } = outboxDatabase(this.sql.databaseType);
    const names = inboxTableNames(outboxDialectOf(this.sql.databaseType), options);
    // TypeORM shares one connection among SQLite transactions; a connection of its own does not.
    this.sharedConnection = this.source !== undefined && inbox.sharedConnection;
    this.insertSql = inbox.insert(names);
    this.recorder = inbox.recorder(names);
    this.purgeSql = inbox.purge(names);
    this.sequence = resolveSequenceOptions(options.sequence);
    this.repair =
      options.sequence?.repair === undefined
        ? null
        : new GapRepairAsker(options.sequence.repair, this.sequence.onGap);
    this.sequenceSql = {
      seed: inbox.sequence.seed?.(names),
      read: inbox.sequence.read(names),
      peek: inbox.sequence.peek(names),
      write: inbox.sequence.write(names),
    };
  }

  /**
   * The TypeORM DataSource the inbox was built on. Throws `OutboxError` for an inbox built on a
   * connection, which has none.
   */
  get dataSource(): DataSource {
    if (this.source === undefined) {
      throw new OutboxError(InboxMessages.onConnection('Inbox.dataSource'));
    }
    return this.source;
  }

  /**
   * Records the id in your open transaction `tx` (an EntityManager inside
   * `dataSource.transaction()`, or the handle your connection joins: a `PoolClient` after
   * `BEGIN`, Prisma's interactive `tx`, Drizzle's `tx` …). Resolves to true the first time: do
   * the work in the same transaction, and both commit or roll back together. False means the
   * id was already recorded for this consumer: skip the work.
   *
   * Two deliveries of one id at once: the second one's insert waits for the first transaction,
   * then resolves to false if it committed, true if it rolled back. Throws
   * `OutboxTransactionRequiredError` when `tx` is not in an open transaction.
   */
  async recordOnce(tx: Tx, entry: InboxEntry): Promise<boolean> {
    refuseUnknownEntryKeys('Inbox.recordOnce()', entry);
    const consumer = checkEntryField('consumer', entry.consumer, INBOX_MAX_CONSUMER_BYTES);
    const messageId = checkEntryField('messageId', entry.messageId, INBOX_MAX_MESSAGE_ID_BYTES);
    const outcome = await this.recorder(this.runnerOf(tx), consumer, messageId);
    if (outcome === 'ended') {
      throw new OutboxTransactionRequiredError(InboxMessages.transactionEndedBeforeRecord());
    }
    return outcome === 'written';
  }

  private runnerOf(tx: Tx): SqlRunner {
    if (this.connection !== undefined) return this.connection.join(tx);
    const manager = this.managerOf(tx as unknown as EntityManager);
    const runner = manager.queryRunner;
    if (runner?.isTransactionActive !== true) {
      throw new OutboxTransactionRequiredError(InboxMessages.transactionRequired());
    }
    return typeormSqlRunner(runner);
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
    if (this.source === undefined) {
      throw new OutboxError(InboxMessages.onConnection('Inbox.handleOnce()'));
    }
    refuseUnknownEntryKeys('Inbox.handleOnce()', entry);
    const consumer = checkEntryField('consumer', entry.consumer, INBOX_MAX_CONSUMER_BYTES);
    const messageId = checkEntryField('messageId', entry.messageId, INBOX_MAX_MESSAGE_ID_BYTES);
    const sequenced =
      entry.sequence === undefined || entry.sequence === null
        ? null
        : checkSequenced(entry.sequence);
    const manager = this.managerOf(target);
    // EntityManager.transaction() opens a transaction, or a savepoint when the manager's query
    // runner is already in one.
    const attempt = (): Promise<InboxOutcome<T>> =>
      manager.transaction(async (tx): Promise<InboxOutcome<T>> => {
        const runner = tx.queryRunner;
        if (runner === undefined)
          throw new OutboxError('The inbox transaction has no query runner');
        const sql = typeormSqlRunner(runner);
        if (!(await this.record(sql, consumer, messageId))) {
          return { handled: false };
        }
        if (sequenced === null) return { handled: true, result: await handler(tx, {}) };
        const sequence = await this.recordSequence(sql, consumer, sequenced);
        return { handled: true, result: await handler(tx, { sequence }), sequence };
      });
    const joinsTransaction = manager.queryRunner?.isTransactionActive === true;
    // While this delivery is here (held or handled), a gap repair of the same inbox does not
    // ask for its number: it is not lost, only not committed yet.
    const release = sequenced === null ? undefined : this.repair?.markHeld(consumer, sequenced);
    try {
      // Held outside the transaction, so that the wait holds no lock and no connection of a
      // pool. Under 'reject' with repair, the message waits `afterMs` and asks before it is
      // refused.
      if (
        sequenced !== null &&
        (this.sequence.onGap === 'hold' ||
          (this.sequence.onGap === 'reject' && this.repair !== null))
      ) {
        await this.holdForPredecessor(consumer, sequenced);
      }
      return await (this.sharedConnection && !joinsTransaction
        ? runSerially(this.source, attempt)
        : attempt());
    } finally {
      release?.();
    }
  }

  /**
   * Deletes ids received more than `olderThanMs` ago (database clock), in batches; resolves to
   * the number deleted. A message redelivered after its id was purged is handled again, so keep
   * ids longer than the longest redelivery can take (broker retention, outbox retry window).
   */
  async purge(olderThanMs: number, options: InboxPurgeOptions = {}): Promise<number> {
    refuseUnknownPurgeOptions(options);
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
    const sql = this.sql;
    const purgeAll = async (): Promise<number> => {
      let total = 0;
      for (;;) {
        // Small statements in autocommit: a long purge never holds locks across the table.
        const { affected } = await sql.query(this.purgeSql, [olderThanMs, batchSize]);
        total += affected;
        if (affected < batchSize) return total;
      }
    };
    return this.sharedConnection && this.source !== undefined
      ? runSerially(this.source, purgeAll)
      : purgeAll();
  }

  private managerOf(target: DataSource | EntityManager): EntityManager {
    const source = this.dataSource;
    const manager = target === source ? source.manager : target;
    if ((manager as Partial<EntityManager>).connection !== source) {
      throw new OutboxError(InboxMessages.foreignManager());
    }
    return manager as EntityManager;
  }

  /**
   * The gap guard in the handler's transaction: the key's last number, locked until the
   * transaction ends (a concurrent delivery of the key waits, the key's first deliveries too:
   * the row is seeded before it is read), compared with the message's; a number that moves the
   * key forward is recorded with the id. `reject` throws on a gap, which rolls the id back too.
   */
  private async recordSequence(
    runner: SqlRunner,
    consumer: string,
    message: SequencedMessage,
  ): Promise<SequenceCheck> {
    const { seed, read } = this.sequenceSql;
    if (seed !== undefined) await runner.query(seed, [consumer, message.key]);
    const { rows } = await runner.query<{ last_seq: unknown }>(read, [consumer, message.key]);
    // 0: the row the seed just made, never committed as it is (the write below raises it).
    const recorded = rows[0] === undefined ? 0 : Number(rows[0].last_seq);
    const last = recorded === 0 ? undefined : recorded;
    const check = compareSequence(last, message.sequence);
    if (check.status === 'gap' && this.sequence.onGap === 'reject') {
      throw new SequenceGapError(message.key, check.expected, message.sequence);
    }
    if (check.status === 'next' || check.status === 'gap') {
      await runner.query(this.sequenceSql.write, [consumer, message.key, message.sequence]);
    }
    return check;
  }

  /**
   * Waits, up to `holdMs`, until the key's last number recorded is the message's predecessor.
   * With repair, a gap that lasts `afterMs` is asked for (again every `retryMs` while it stays
   * open), and numbers the producer answers gone or dead are no longer waited for: once only
   * those are missing, the wait ends and the message is handled as a gap. Under 'reject' the
   * wait lasts `afterMs` and one request.
   */
  private async holdForPredecessor(consumer: string, message: SequencedMessage): Promise<void> {
    const repair = this.repair;
    const askOnce = this.sequence.onGap === 'reject';
    const start = Date.now();
    const deadline = start + (askOnce ? (repair?.afterMs ?? 0) : this.sequence.holdMs);
    let askAt = repair === null ? Infinity : start + repair.afterMs;
    let asked = false;
    const settled = new Set<number>();
    for (;;) {
      const before = repair?.snapshot(consumer, message.key);
      const last = await this.lastRecorded(consumer, message.key);
      if (compareSequence(last, message.sequence).status !== 'gap') return;
      if (repair !== null) {
        const open = repair.open(last, message.sequence, settled);
        // Only numbers that will never come are missing: waiting longer cannot help.
        if (open.length === 0) return;
        if (Date.now() >= askAt) {
          const wanted =
            before === undefined ? [] : repair.toAsk(consumer, message.key, last, open, before);
          // A delivery of the key ended meanwhile: read its last number again before asking.
          if (wanted === null) continue;
          if (wanted.length > 0) {
            const answer = await repair.ask(consumer, message.key, wanted);
            asked = true;
            for (const n of [...(answer?.gone ?? []), ...(answer?.dead ?? [])]) settled.add(n);
            askAt = Date.now() + (answer?.retryAfterMs ?? repair.retryMs);
            continue;
          }
          askAt = Date.now() + repair.retryMs;
        }
        if (askOnce && (asked || Date.now() >= deadline)) return;
      }
      const left = deadline - Date.now();
      if (left <= 0) return;
      await new Promise((resolve) => setTimeout(resolve, Math.min(HOLD_POLL_MS, left)));
    }
  }

  /** The key's last number recorded for the consumer (committed), or undefined. */
  private async lastRecorded(consumer: string, key: string): Promise<number | undefined> {
    const { rows } = await this.sql.query<{ last_seq: unknown }>(this.sequenceSql.peek, [
      consumer,
      key,
    ]);
    if (rows[0] === undefined) return undefined;
    const last = Number(rows[0].last_seq);
    // 0: a seeded row whose first number has not committed.
    return last === 0 ? undefined : last;
  }

  /** Inserts the id through the transaction's runner; false when it was already there. */
  private async record(runner: SqlRunner, consumer: string, messageId: string): Promise<boolean> {
    const { affected } = await runner.query(this.insertSql, [consumer, messageId]);
    return affected === 1;
  }
}
