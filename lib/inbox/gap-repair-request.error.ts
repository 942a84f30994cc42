import { OutboxError } from '../errors/outbox.error';

/**
 * A gap-repair request that got no usable answer: the producer could not be reached, timed out,
 * refused access, or answered something that is not an answer. The inbox keeps holding the
 * message and asks again after `retryMs`.
 */
export class GapRepairRequestError extends OutboxError {
  constructor(
    message: string,
    /** The HTTP status, when one came back. */
    readonly status: number | null,
  ) {
    super(message);
  }
}
