import { createHash } from 'node:crypto';

/** SQS FIFO queues and SNS FIFO topics are the ones whose name ends in `.fifo`. */
export function isFifoDestination(urlOrArn: string): boolean {
  return urlOrArn.endsWith('.fifo');
}

// What SQS and SNS take as a MessageGroupId or MessageDeduplicationId: 1 to 128 of the
// printable ASCII characters (letters, digits and punctuation).
const GROUP_ID = /^[\x21-\x7e]{1,128}$/;

export function isAwsGroupId(value: string): boolean {
  return GROUP_ID.test(value);
}

/**
 * The MessageGroupId of a message on a FIFO queue or topic: its key as it is when AWS takes it,
 * otherwise (longer than 128 characters, spaces, non-ASCII) `sha256:` and the key's SHA-256 in
 * base64url, the same for every message of the key. A message without a key gets its own
 * message id: it is ordered after nothing, as in the outbox, and blocks no other message.
 */
export function awsMessageGroupId(key: string | null, messageId: string): string {
  if (key === null) return messageId;
  if (isAwsGroupId(key)) return key;
  return `sha256:${createHash('sha256').update(key, 'utf8').digest('base64url')}`;
}
