import { OutboxOptionsError } from '../errors/outbox-options.error';
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
