import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OUTBOX_HEADER_KEY, OUTBOX_HEADER_SEQUENCE } from '../outbox.constants';
import { InboxMessages } from './inbox.messages';
import { InvalidSequenceError } from './invalid-sequence.error';
import type {
  SequenceCheck,
  SequencedMessage,
  SequenceGapPolicy,
  SequenceOptions,
} from './sequence.interfaces';

/** The gap guard's options with their defaults. */
export interface ResolvedSequenceOptions {
  readonly onGap: SequenceGapPolicy;
  readonly holdMs: number;
}

const MAX_HOLD_MS = 600_000;

/** Checks the options once (throws `OutboxOptionsError` saying how to fix them). */
export function resolveSequenceOptions(
  options: SequenceOptions = {},
  path = 'sequence',
): ResolvedSequenceOptions {
  const onGap = options.onGap ?? 'accept';
  if (onGap !== 'hold' && onGap !== 'accept' && onGap !== 'reject') {
    throw new OutboxOptionsError(
      InboxMessages.optionInvalid(
        `${path}.onGap`,
        `${JSON.stringify(onGap)} is not a policy`,
        "Use 'accept', 'hold' or 'reject'.",
      ),
      `${path}.onGap`,
    );
  }
  const holdMs = options.holdMs ?? 5_000;
  if (!Number.isInteger(holdMs) || holdMs < 1 || holdMs > MAX_HOLD_MS) {
    throw new OutboxOptionsError(
      InboxMessages.optionInvalid(
        `${path}.holdMs`,
        `${String(holdMs)} is not a whole number of ms from 1 to ${MAX_HOLD_MS}`,
        'Pass how long a message waits for its predecessor, e.g. 5000.',
      ),
      `${path}.holdMs`,
    );
  }
  return { onGap, holdMs };
}

/** Validates a message's key and number (throws `InvalidSequenceError`). */
export function checkSequenced(message: SequencedMessage): SequencedMessage {
  if (typeof message.key !== 'string' || message.key === '') {
    throw new InvalidSequenceError('the key must be a non-empty string');
  }
  if (!Number.isSafeInteger(message.sequence) || message.sequence < 1) {
    throw new InvalidSequenceError(`${String(message.sequence)} is not a positive integer`);
  }
  return message;
}

/** How `sequence` stands after `last` (undefined: the key was never seen, so 1 is next). */
export function compareSequence(last: number | undefined, sequence: number): SequenceCheck {
  const expected = (last ?? 0) + 1;
  if (sequence === expected) return { status: 'next', expected };
  if (sequence > expected) return { status: 'gap', expected };
  return { status: sequence === last ? 'duplicate' : 'out-of-order', expected };
}

/** A header's value as text: AMQP and NATS give text or numbers, Kafka bytes, some a list. */
function headerText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'number') return String(value);
  if (value instanceof Uint8Array) return Buffer.from(value).toString('utf8');
  if (Array.isArray(value)) return headerText(value[0]);
  return undefined;
}

/**
 * A message's key and number from its headers (`x-outbox-key`, `x-outbox-sequence`: AMQP
 * headers, Kafka headers as bytes, NATS or Redis fields as text), or null when it carries none
 * (a message without a key, or from a producer without `ordering.sequence`).
 */
export function sequenceOf(
  headers: Readonly<Record<string, unknown>> | undefined | null,
): SequencedMessage | null {
  if (headers === undefined || headers === null) return null;
  const key = headerText(headers[OUTBOX_HEADER_KEY]);
  const raw = headerText(headers[OUTBOX_HEADER_SEQUENCE]);
  if (key === undefined || key === '' || raw === undefined || !/^[1-9][0-9]{0,15}$/.test(raw)) {
    return null;
  }
  const sequence = Number(raw);
  return Number.isSafeInteger(sequence) ? { key, sequence } : null;
}
