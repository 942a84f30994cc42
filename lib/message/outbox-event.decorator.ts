import 'reflect-metadata';
import { OUTBOX_EVENT_METADATA } from '../outbox.constants';
import { refuseUnknownOutboxEventOptions } from './outbox-event-option-keys';
import type { OutboxEventOptions } from './outbox-message.interface';

/** Metadata stored on an event class; the class name stands in for a missing `type`. */
export interface OutboxEventMetadata extends OutboxEventOptions<object> {
  readonly type: string;
}

/**
 * Marks a class as an outbox event: instances can be passed to `OutboxService.enqueue()` and are
 * published to `topic`, keyed by `key`. Only stores metadata; the resolved topic, type, key and
 * headers are written on the row, so the dispatcher never needs the class.
 *
 * `key` and `headers` functions run inside `enqueue()`: if one throws, the call fails with
 * `OutboxInvalidMessageError` (reason `invalid-key` or `invalid-header`, the thrown error as
 * `cause`) and writes nothing. A key these options do not have (in `policy` and `personal`
 * too) throws `OutboxOptionsError` when the class is defined.
 *
 * @example
 * ＠OutboxEvent({ topic: 'orders', type: 'order.created', key: 'orderId' })
 * export class OrderCreated { constructor(readonly orderId: string) {} }
 */
export function OutboxEvent<TEvent extends object>(
  options: OutboxEventOptions<TEvent>,
): (target: abstract new (...args: never[]) => TEvent) => void {
  refuseUnknownOutboxEventOptions(options);
  return (target) => {
    const metadata: OutboxEventMetadata = {
      ...(options as OutboxEventOptions<object>),
      type: options.type ?? target.name,
    };
    Reflect.defineMetadata(OUTBOX_EVENT_METADATA, metadata, target);
  };
}

/** Reads `@OutboxEvent()` metadata from an instance's class (or a parent class). */
export function getOutboxEventMetadata(event: object): OutboxEventMetadata | undefined {
  const ctor: unknown = event.constructor;
  if (typeof ctor !== 'function') return undefined;
  return Reflect.getMetadata(OUTBOX_EVENT_METADATA, ctor) as OutboxEventMetadata | undefined;
}

/** Reads `@OutboxEvent()` metadata from a class (or a parent class). */
export function getOutboxEventClassMetadata(target: unknown): OutboxEventMetadata | undefined {
  if (typeof target !== 'function') return undefined;
  return Reflect.getMetadata(OUTBOX_EVENT_METADATA, target) as OutboxEventMetadata | undefined;
}
