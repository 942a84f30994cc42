import type {
  DataSource,
  EntitySubscriberInterface,
  QueryRunner,
  TransactionCommitEvent,
} from 'typeorm';

/**
 * Tells the local dispatcher when a transaction that enqueued messages commits, so they go out
 * without waiting for the next poll. Only a wake-up: the claim query stays the sole source of
 * work, so a missed or early nudge can neither lose nor duplicate a message.
 */
export class CommitWatcher implements EntitySubscriberInterface {
  private readonly enqueued = new WeakSet<QueryRunner>();
  private listener: (() => void) | undefined;

  constructor(private readonly dataSource: DataSource) {}

  attach(listener: () => void): void {
    this.listener = listener;
    if (!this.dataSource.subscribers.includes(this)) this.dataSource.subscribers.push(this);
  }

  detach(): void {
    this.listener = undefined;
    const index = this.dataSource.subscribers.indexOf(this);
    if (index >= 0) this.dataSource.subscribers.splice(index, 1);
  }

  /** Marks a transaction as having enqueued messages. */
  track(queryRunner: QueryRunner | undefined): void {
    if (queryRunner !== undefined && this.listener !== undefined) this.enqueued.add(queryRunner);
  }

  afterTransactionCommit(event: TransactionCommitEvent): void {
    const runner = event.queryRunner;
    // Savepoint releases also broadcast "commit"; only the outermost commit publishes rows.
    if (runner.isTransactionActive || !this.enqueued.has(runner)) return;
    this.enqueued.delete(runner);
    this.listener?.();
  }

  afterTransactionRollback(event: TransactionCommitEvent): void {
    if (!event.queryRunner.isTransactionActive) this.enqueued.delete(event.queryRunner);
  }
}
