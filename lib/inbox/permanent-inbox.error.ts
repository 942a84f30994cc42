import { InvalidInboxEntryError } from './invalid-inbox-entry.error';
import { MessageIdMissingError } from './message-id-missing.error';

/**
 * Whether an error from the inbox means the message can never be handled as it is: it has no
 * usable id (`MessageIdMissingError`) or one the inbox refuses (`InvalidInboxEntryError`, e.g.
 * over 255 bytes). Delivering such a message again fails again, so a consumer rejects it without
 * requeue (a dead-letter exchange keeps it), or logs and skips it on Kafka, instead of looping.
 */
export function isPermanentInboxError(error: unknown): boolean {
  return error instanceof MessageIdMissingError || error instanceof InvalidInboxEntryError;
}
