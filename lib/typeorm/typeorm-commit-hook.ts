import type {
  DataSource,
  EntitySubscriberInterface,
  QueryRunner,
  TransactionCommitEvent,
} from 'typeorm';

/**
 * TypeORM's commit event as `OutboxConnection.afterCommit`: a subscriber on the DataSource that
 * calls a transaction's wake-up once its outermost commit is done. Only a wake-up: the claim
 * query stays the sole source of work, so a missed or early nudge can neither lose nor
 * duplicate a message.
 */
export class TypeormCommitHook implements EntitySubscriberInterface {
  private readonly waiting = new WeakMap<QueryRunner, () => void>();

  constructor(private readonly dataSource: DataSource) {}

  /** Wakes `wake` after `runner`'s transaction commits. */
  track(runner: QueryRunner, wake: () => void): void {
    // Subscribed on first use rather than at construction: an enqueue-only app never needs it.
    if (!this.dataSource.subscribers.includes(this)) this.dataSource.subscribers.push(this);
    this.waiting.set(runner, wake);
  }

  /** Unsubscribes from the DataSource. */
  detach(): void {
    const index = this.dataSource.subscribers.indexOf(this);
    if (index >= 0) this.dataSource.subscribers.splice(index, 1);
  }

  afterTransactionCommit(event: TransactionCommitEvent): void {
    const runner = event.queryRunner;
    // Savepoint releases also broadcast "commit"; only the outermost commit publishes rows.
    if (runner.isTransactionActive) return;
    const wake = this.waiting.get(runner);
    if (wake === undefined) return;
    this.waiting.delete(runner);
    wake();
  }

  afterTransactionRollback(event: TransactionCommitEvent): void {
    if (!event.queryRunner.isTransactionActive) this.waiting.delete(event.queryRunner);
  }
}
