import 'reflect-metadata';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { refuseUnknownCallOptions } from '../../internal/known-keys';
import { OUTBOX_HANDLER_METADATA } from '../../outbox.constants';
import { LocalMessages } from './local.messages';
import type {
  OnOutboxMessageOptions,
  OutboxHandlerMessage,
} from './outbox-handler-message.interface';

/** A method that can handle outbox messages: it takes the message (or nothing). */
export type OutboxHandlerMethod = (message: OutboxHandlerMessage<never>) => unknown;

const OPTION_KEYS = {
  '': { topic: true, type: true } satisfies Record<keyof OnOutboxMessageOptions, true>,
} as const;

function subscriptionOf(topicOrOptions: string | OnOutboxMessageOptions): OnOutboxMessageOptions {
  const options = typeof topicOrOptions === 'string' ? { topic: topicOrOptions } : topicOrOptions;
  if (typeof options !== 'object' || options === null) {
    throw new OutboxOptionsError(
      LocalMessages.badSubscription('the argument', 'is not a topic nor { topic, type? }'),
      'topic',
    );
  }
  // `{ topic, typ }` would otherwise handle every message of the topic.
  refuseUnknownCallOptions('@OnOutboxMessage()', options, OPTION_KEYS);
  if (typeof options.topic !== 'string' || options.topic === '') {
    throw new OutboxOptionsError(
      LocalMessages.badSubscription('topic', 'must be a non-empty string'),
      'topic',
    );
  }
  if (options.type !== undefined && (typeof options.type !== 'string' || options.type === '')) {
    throw new OutboxOptionsError(
      LocalMessages.badSubscription('type', 'must be a non-empty string when given'),
      'type',
    );
  }
  return options.type === undefined
    ? { topic: options.topic }
    : { topic: options.topic, type: options.type };
}

/**
 * Marks a method of a provider as a handler of outbox messages of `topic` (and, with
 * `{ topic, type }`, of one event type only). `OutboxHandlersModule`'s `LocalPublisher` finds
 * it at bootstrap and calls it, after the enqueuing transaction committed, with an
 * {@link OutboxHandlerMessage}. A message counts as delivered once every handler of it resolved;
 * a throw is a failed delivery, retried with the outbox's backoff and dead-lettered after
 * `retry.maxAttempts` (`PermanentPublishError`: dead at once). A method may carry several.
 *
 * @example
 * ＠OnOutboxMessage('orders')
 * async onOrder(message: OutboxHandlerMessage<{ orderId: string }>): Promise<void> { … }
 */
export function OnOutboxMessage(
  topicOrOptions: string | OnOutboxMessageOptions,
): <T extends OutboxHandlerMethod>(
  target: object,
  method: string | symbol,
  descriptor: TypedPropertyDescriptor<T>,
) => void {
  const subscription = subscriptionOf(topicOrOptions);
  return (target, method) => {
    const previous = getOutboxHandlerSubscriptions(target, method);
    Reflect.defineMetadata(OUTBOX_HANDLER_METADATA, [...previous, subscription], target, method);
  };
}

/** The subscriptions `@OnOutboxMessage()` put on a method (of a prototype), in the order they were applied. */
export function getOutboxHandlerSubscriptions(
  prototype: object,
  method: string | symbol,
): readonly OnOutboxMessageOptions[] {
  const found: unknown = Reflect.getMetadata(OUTBOX_HANDLER_METADATA, prototype, method);
  return Array.isArray(found) ? (found as OnOutboxMessageOptions[]) : [];
}
