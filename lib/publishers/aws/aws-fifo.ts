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

/** The FIFO fields of an entry (`awsOrdering`): the broker's per-group order and deduplication. */
export interface AwsOrderingFields {
  MessageGroupId?: string;
  MessageDeduplicationId?: string;
}

/**
 * The ordering fields of one message to `destination`: on a FIFO queue or topic its group (the
 * one given in its attributes, else its key's) and its id for deduplication; elsewhere only a
 * group given in its attributes (a fair queue's tenant).
 */
export function awsOrdering(
  destination: string,
  record: { readonly key: string | null; readonly messageId: string },
  messageGroupId: string | undefined,
): AwsOrderingFields {
  if (isFifoDestination(destination)) {
    return {
      MessageGroupId: messageGroupId ?? awsMessageGroupId(record.key, record.messageId),
      MessageDeduplicationId: record.messageId,
    };
  }
  return messageGroupId === undefined ? {} : { MessageGroupId: messageGroupId };
}
