import { OutboxError } from './outbox.error';

/**
 * The broker could not be reached (connection refused or lost, channel closed, blocked, or
 * every publish of a batch timed out). The dispatcher releases the batch without counting an
 * attempt and pauses claiming with backoff: an outage must not dead-letter healthy messages.
 */
export class PublisherUnavailableError extends OutboxError {}
