import { OutboxError } from './outbox.error';

/** A publish got no broker answer within `publishTimeout`; its outcome is unknown, so it is retried. */
export class PublishTimeoutError extends OutboxError {
  constructor(readonly timeoutMs: number) {
    super(`No broker acknowledgement within ${timeoutMs} ms`);
  }
}
