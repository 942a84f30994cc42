import { OutboxError } from './outbox.error';

/**
 * Throw (or return as the failure) from a publisher when retrying cannot help, e.g. the broker
 * rejected the message itself. The dispatcher dead-letters the message at once.
 */
export class PermanentPublishError extends OutboxError {}
