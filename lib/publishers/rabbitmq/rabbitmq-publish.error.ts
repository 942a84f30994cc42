import { OutboxError } from '../../errors/outbox.error';

/** Why RabbitMQ did not take a message. */
export type RabbitMqPublishFailure = 'unroutable' | 'nacked' | 'channel-error';

/**
 * RabbitMQ refused one message: it was returned as unroutable (no queue bound for its routing
 * key), negatively confirmed, or its publish closed the channel (e.g. 404: the exchange does not
 * exist). The dispatcher retries it with backoff and dead-letters it after `maxAttempts`.
 */
export class RabbitMqPublishError extends OutboxError {
  constructor(
    message: string,
    readonly reason: RabbitMqPublishFailure,
    readonly exchange: string,
    readonly routingKey: string,
    /** AMQP reply code, e.g. 312 NO_ROUTE or 404 NOT_FOUND. */
    readonly replyCode?: number,
  ) {
    super(message);
  }
}
