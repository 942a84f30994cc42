import { OutboxExternalDeliveryError } from '../errors/outbox-external-delivery.error';
import type { OutboxBatchReport } from '../observers/outbox-observer.interface';
import { OutboxMessages } from '../outbox.messages';
import type { DeliverySource, DrainTimes, SourceContext, SourceStop } from './delivery-source';

/**
 * No source: another engine (Debezium's outbox router) reads the table and publishes every row.
 * Nothing is leased or settled here: a second delivery path would send each message twice, and
 * its settle would reach the connector as an update. So `drain()` and `runOnce()` refuse.
 */
export class NoSource implements DeliverySource {
  readonly delivers = false;
  readonly unsettled = '';
  readonly drainTimes: DrainTimes = { runningSince: undefined, lastFinishedAt: undefined };

  constructor(private readonly context: SourceContext) {}

  get description(): string {
    return `Outbox "${this.context.options.name}": delivery is external (Debezium or another engine reading the database log); no dispatcher runs`;
  }

  prepare(): Promise<void> {
    return Promise.resolve();
  }

  start(): Promise<void> {
    return Promise.resolve();
  }

  wake(): void {
    // Nothing here delivers.
  }

  drain(): Promise<number> {
    return Promise.reject(this.refusal('drain()'));
  }

  runOnce(): Promise<OutboxBatchReport> {
    return Promise.reject(this.refusal('runOnce()'));
  }

  stop(): SourceStop {
    return { idle: Promise.resolve(), closing: [] };
  }

  stillRunning(): string[] {
    return [];
  }

  lag(): Promise<null> {
    return Promise.resolve(null);
  }

  private refusal(call: string): OutboxExternalDeliveryError {
    const name = this.context.options.name;
    return new OutboxExternalDeliveryError(OutboxMessages.externalDelivery(name, call), name);
  }
}
