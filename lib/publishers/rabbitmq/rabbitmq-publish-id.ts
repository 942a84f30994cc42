/**
 * Header naming one publish of a message (it differs on every attempt of the same message). A
 * `basic.return` carries the message's headers back, so this is how a return is matched to the
 * exact publish it answers. Consumers deduplicate on `x-outbox-message-id`, not on this.
 * It also marks a message as sent by `RabbitMqPublisher` (see `RabbitMqOutboxDeserializer`).
 */
export const RABBITMQ_PUBLISH_ID_HEADER = 'x-outbox-publish-id';

/**
 * With `outboxHeaders: false` a message has no publish-id header, and its publish id travels in
 * the `correlationId` property instead, after this prefix: a return comes back with its properties,
 * and the prefix marks the message as the publisher's as the header does. (A Nest client's
 * `send()` uses `correlationId` for its request id, which never starts so.)
 */
export const RABBITMQ_PUBLISH_ID_CORRELATION_PREFIX = 'x-outbox-publish:';

/** The properties of a returned or consumed message that can name its publish. */
export interface PublishIdCarrier {
  readonly headers?: Readonly<Record<string, unknown>> | null;
  readonly correlationId?: unknown;
}

/** The publish id of a message `RabbitMqPublisher` sent, in either form; undefined otherwise. */
export function publishIdOf(properties: PublishIdCarrier | undefined): string | undefined {
  const header = properties?.headers?.[RABBITMQ_PUBLISH_ID_HEADER];
  if (typeof header === 'string') return header;
  const correlation = properties?.correlationId;
  return typeof correlation === 'string' &&
    correlation.startsWith(RABBITMQ_PUBLISH_ID_CORRELATION_PREFIX)
    ? correlation.slice(RABBITMQ_PUBLISH_ID_CORRELATION_PREFIX.length)
    : undefined;
}
