import type { OutboxConnection } from '../../store/ports/outbox-connection';
import type { OutboxEnqueuePort } from '../../store/ports/outbox-store.port';

/**
 * Tells the local dispatcher when a transaction that enqueued messages commits, so they go out
 * without waiting for the next poll, through the connection's `afterCommit` (TypeORM's
 * subscribers; libraries without a commit event rely on LISTEN and the poll), and the store,
 * which then wakes the dispatchers of other processes (`wakeListeners`: PostgreSQL's NOTIFY,
 * sent after the commit instead of inside it). Only a wake-up: the claim query stays the sole
 * source of work, so a missed or early nudge can neither lose nor duplicate a message.
 */
export class CommitWatcher<Tx> {
  private listener: (() => void) | undefined;
  private readonly wake = (): void => {
    this.listener?.();
    this.store?.wakeListeners?.();
  };

  constructor(
    private readonly connection: OutboxConnection<Tx>,
    private readonly store?: Pick<OutboxEnqueuePort, 'wakeListeners'>,
  ) {}

  attach(listener: () => void): void {
    this.listener = listener;
  }

  detach(): void {
    this.listener = undefined;
  }

  /** Marks a transaction as having enqueued messages. */
  track(tx: Tx): void {
    if (this.listener !== undefined || this.store?.wakeListeners !== undefined) {
      this.connection.afterCommit?.(tx, this.wake);
    }
  }
}
