import 'reflect-metadata';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { refuseUnknownCallOptions } from '../../internal/known-keys';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import { OUTBOX_DEAD_LETTER_METADATA } from '../../outbox.constants';
import { OutboxMessages } from '../../outbox.messages';

/** What a fallback may answer: `{ settled: true }` marks the message settled instead of dead. */
export interface OutboxFallbackResult {
  readonly settled: boolean;
}

/** Which outbox instances a fallback serves. */
export interface OnOutboxDeadLetterOptions {
  /** Only the instance of this name (`OutboxModule.forRoot({ name })`). @default every instance */
  readonly outbox?: string;
}

const OPTION_KEYS = {
  '': { outbox: true } satisfies Record<keyof OnOutboxDeadLetterOptions, true>,
} as const;

/** A method that can be a fallback: it takes the message and the error it would die of. */
export type OutboxDeadLetterMethod = (
  record: OutboxRecord,
  error: unknown,
) => OutboxFallbackResult | void | Promise<OutboxFallbackResult | void>;

/** One `@OnOutboxDeadLetter()` of a method. */
export interface OutboxDeadLetterSubscription {
  readonly type: string;
  readonly outbox: string | undefined;
}

/**
 * Marks a method of a provider as the fallback of one event type: the dispatcher calls it right
 * before it would dead-letter a message of that type (retries exhausted, a permanent error, the
 * message's expiry), with the message and the error. It may compensate, reroute or deliver
 * elsewhere, and return `{ settled: true }` to mark the message settled (delivered, not dead);
 * returning nothing lets it be dead-lettered, and so does a throw (noted in its last error).
 * Found at bootstrap on the app's singleton providers; one fallback per event type.
 *
 * @example
 * ＠OnOutboxDeadLetter('payment.captured')
 * async refund(record: OutboxRecord, error: unknown): Promise<OutboxFallbackResult> { … }
 */
export function OnOutboxDeadLetter(
  type: string,
  options: OnOutboxDeadLetterOptions = {},
): <T extends OutboxDeadLetterMethod>(
  target: object,
  method: string | symbol,
  descriptor: TypedPropertyDescriptor<T>,
) => void {
  if (typeof type !== 'string' || type === '') {
    throw new OutboxOptionsError(
      OutboxMessages.badFallback('its event type must be a non-empty string'),
      'type',
    );
  }
  // `{ outbx: 'audit' }` would otherwise make a fallback of every instance.
  refuseUnknownCallOptions('@OnOutboxDeadLetter()', options, OPTION_KEYS);
  if (
    options.outbox !== undefined &&
    (typeof options.outbox !== 'string' || options.outbox === '')
  ) {
    throw new OutboxOptionsError(
      OutboxMessages.badFallback('outbox must be an instance name when given'),
      'outbox',
    );
  }
  const subscription: OutboxDeadLetterSubscription = { type, outbox: options.outbox };
  return (target, method) => {
    const previous = getOutboxDeadLetterSubscriptions(target, method);
    Reflect.defineMetadata(
      OUTBOX_DEAD_LETTER_METADATA,
      [...previous, subscription],
      target,
      method,
    );
  };
}

/** The `@OnOutboxDeadLetter()` subscriptions of a method (none when it has no decorator). */
export function getOutboxDeadLetterSubscriptions(
  target: object,
  method: string | symbol,
): readonly OutboxDeadLetterSubscription[] {
  return (
    (Reflect.getMetadata(OUTBOX_DEAD_LETTER_METADATA, target, method) as
      readonly OutboxDeadLetterSubscription[] | undefined) ?? []
  );
}
