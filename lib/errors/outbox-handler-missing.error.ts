import { PermanentPublishError } from './permanent-publish.error';

/**
 * No `@OnOutboxMessage()` handler in this app takes the message (its topic, or its type on that
 * topic). Permanent: the message is dead-lettered at once rather than counted as delivered; an
 * operator retries it once a handler is deployed.
 */
export class OutboxHandlerMissingError extends PermanentPublishError {
  constructor(
    message: string,
    readonly topic: string,
    readonly type: string,
  ) {
    super(message);
  }
}
