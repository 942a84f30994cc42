import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';

/** Where RabbitMQ refused: the login, access to the vhost, or an operation the permissions do not allow. */
export type RabbitMqRefusal = 'login' | 'vhost' | 'permission';

/**
 * RabbitMQ refused the publisher's user: wrong username or password, no access to the vhost, or
 * vhost permissions (configure/write) that do not cover an exchange or the topology. It is a
 * `PublisherUnavailableError`, so the dispatcher hands the messages back without counting an
 * attempt: they wait in the outbox until the configuration is fixed, and are neither lost nor
 * dead-lettered. The publisher logs it at error level on every connection attempt.
 */
export class RabbitMqAccessRefusedError extends PublisherUnavailableError {
  constructor(
    message: string,
    readonly refusal: RabbitMqRefusal,
    /** The broker, without credentials: `amqp://host:5672/vhost`. */
    readonly endpoint: string,
    readonly user: string | undefined,
    readonly vhost: string,
    /** AMQP reply code when the broker sent one the client exposes (403 ACCESS_REFUSED). */
    readonly replyCode: number | undefined,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
