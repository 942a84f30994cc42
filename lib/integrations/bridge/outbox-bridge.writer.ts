import { OutboxBridgeError } from '../../errors/outbox-bridge.error';
import { OutboxTransactionRequiredError } from '../../errors/outbox-transaction-required.error';
import { getOutboxEventMetadata } from '../../message/outbox-event.decorator';
import { OutboxMessages } from '../../outbox.messages';
import type { OutboxService } from '../../outbox.service';
import { writesOf } from '../cls/transaction-writes';
import type { ResolvedOutboxBridgeOptions } from './outbox-bridge.options';

/** Whether `value` is an instance of an `@OutboxEvent()` class. */
export function isOutboxEvent(value: unknown): value is object {
  return typeof value === 'object' && value !== null && getOutboxEventMetadata(value) !== undefined;
}

/**
 * What both bridges do with the outbox events of one call: write them in the ambient
 * transaction, tracked by its guard, or tell the bridge to hand them on (outside a transaction,
 * with `outsideTransaction: 'publish'`). Everything it refuses, it refuses before writing, and by
 * throwing at once, so that even an unawaited call fails where it was made.
 */
export class OutboxBridgeWriter {
  constructor(
    private readonly outbox: OutboxService<unknown>,
    private readonly options: ResolvedOutboxBridgeOptions,
    /** How the bridge's call is named in messages: `EventBus.publish()`. */
    private readonly call: string,
  ) {}

  /**
   * Enqueues `events` in the current transaction; resolves when they are written. Undefined when
   * there is no transaction and they are to be handed on instead.
   */
  write(events: readonly object[]): Promise<void> | undefined {
    const tx = this.outbox.currentTransaction();
    if (tx === undefined) {
      if (this.options.outsideTransaction === 'publish') return undefined;
      throw new OutboxTransactionRequiredError(OutboxMessages.bridgeTransactionRequired(this.call));
    }
    const writes = writesOf(tx);
    if (writes === undefined && this.options.requireGuard) {
      throw new OutboxBridgeError(
        OutboxMessages.bridgeUnguarded(this.call),
        'unguarded-transaction',
      );
    }
    const written = this.outbox.enqueue(events, tx).then(() => undefined);
    writes?.track(written);
    return written;
  }

  /**
   * For a synchronous call (`EventEmitter2.emit()`) that carries an outbox event: throws inside a
   * transaction (it could not wait for the write) and, with `outsideTransaction: 'refuse'`,
   * outside one; returns when the event is to be handed on.
   */
  handOnOrThrow(): void {
    if (this.outbox.currentTransaction() !== undefined) {
      throw new OutboxBridgeError(OutboxMessages.bridgeSynchronousEmit(), 'synchronous-emit');
    }
    if (this.options.outsideTransaction === 'refuse') {
      throw new OutboxTransactionRequiredError(OutboxMessages.bridgeTransactionRequired(this.call));
    }
  }
}
