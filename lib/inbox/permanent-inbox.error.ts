import { InvalidInboxEntryError } from './invalid-inbox-entry.error';
import { MessageIdMissingError } from './message-id-missing.error';

/**
 * Whether an error from the inbox means the message can never be handled as it is: it has no
 * usable id (`MessageIdMissingError`) or one the inbox refuses (`InvalidInboxEntryError` on
 * `messageId`, e.g. over 255 bytes). Delivering such a message again fails again, so a consumer rejects it without
 * requeue (a dead-letter exchange keeps it), or logs and skips it on Kafka, instead of looping.
 */
export function isPermanentInboxError(error: unknown): boolean {
  // A bad consumer name is the application's bug, not the message's: rejecting would drop
  // every message, so only the message id's problems count as the message's own.
  return (
    error instanceof MessageIdMissingError ||
    (error instanceof InvalidInboxEntryError && error.field === 'messageId')
  );
}
