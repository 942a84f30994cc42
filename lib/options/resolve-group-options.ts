import type { OutboxRecord } from '../message/outbox-record.interface';
import { OUTBOX_DEFAULTS } from './outbox-defaults';
import { checks, DAY, fail, MINUTE, section } from './outbox-option-checks';
import type {
  OutboxCleanerOptions,
  OutboxOrderingOptions,
  OutboxRetryOptions,
  OutboxUnlockerOptions,
} from './outbox.options';
import type { OutboxQueuePolicy } from '../store/ports/outbox-store.port';
import { queuePolicyOf } from './queue-policy';

export interface ResolvedOrderingOptions {
  readonly enabled: boolean;
  readonly onDeadLetter: 'block' | 'skip';
  readonly maxRun: number;
  /** Whether enqueue numbers each key's messages (`x-outbox-sequence`). */
  readonly sequence: boolean;
  /** Event types whose policy's `onDeadLetter` differs from `onDeadLetter` (see `policies`). */
  readonly deadLetterExceptions: readonly string[];
  /** The queue's rules these options make, worked out once here for every part of the module. */
  readonly queue: OutboxQueuePolicy;
}

export interface ResolvedRetryOptions {
  readonly maxAttempts: number;
  readonly initialDelayMs: number;
  readonly maxDelayMs: number;
  readonly factor: number;
  readonly jitter: number;
  readonly maxAgeMs: number;
  readonly retryIf: ((error: unknown, record: OutboxRecord) => boolean) | undefined;
}

export interface ResolvedUnlockerOptions {
  readonly intervalMs: number;
}

export interface ResolvedCleanerOptions {
  readonly intervalMs: number;
  readonly deliveredRetentionMs: number;
  readonly deadRetentionMs: number | null;
  readonly batchSize: number;
  readonly archive: boolean;
}

const { show, integer, real, bool } = checks;

export function resolveOrderingOptions(
  value: OutboxOrderingOptions | undefined,
  batchSize?: number,
): ResolvedOrderingOptions {
  const defaults = OUTBOX_DEFAULTS.ordering;
  const ordering = section(value, 'ordering');
  const onDeadLetter = ordering.onDeadLetter ?? defaults.onDeadLetter.value;
  if (onDeadLetter !== 'block' && onDeadLetter !== 'skip') {
    fail(
      'ordering.onDeadLetter',
      `${show(onDeadLetter)} is not a policy`,
      "Use 'block' (hold the key until an operator acts) or 'skip'.",
    );
  }
  const enabled = bool(ordering.enabled, defaults.enabled.value, 'ordering.enabled');
  const maxRun = integer(ordering.maxRun, defaults.maxRun.value, 'ordering.maxRun', 1, 1_000, '');
  const sequence = bool(ordering.sequence, defaults.sequence.value, 'ordering.sequence');
  return {
    enabled,
    onDeadLetter,
    maxRun,
    sequence,
    deadLetterExceptions: [],
    queue: queuePolicyOf({ enabled, onDeadLetter, maxRun }, batchSize),
  };
}

/** The ordering options with the event types whose dead messages do the opposite of the module's. */
export function withDeadLetterExceptions(
  ordering: ResolvedOrderingOptions,
  exceptions: readonly string[],
  batchSize?: number,
): ResolvedOrderingOptions {
  if (exceptions.length === 0) return ordering;
  return {
    ...ordering,
    deadLetterExceptions: exceptions,
    queue: queuePolicyOf({ ...ordering, deadLetterExceptions: exceptions }, batchSize),
  };
}

export function resolveRetryOptions(value: OutboxRetryOptions | undefined): ResolvedRetryOptions {
  const defaults = OUTBOX_DEFAULTS.retry;
  const r = section(value, 'retry');
  const initialDelayMs = integer(
    r.initialDelayMs,
    defaults.initialDelayMs.value,
    'retry.initialDelayMs',
    0,
    DAY,
    ' ms',
  );
  const maxDelayMs = integer(
    r.maxDelayMs,
    defaults.maxDelayMs.rule({ initialDelayMs }),
    'retry.maxDelayMs',
    0,
    30 * DAY,
    ' ms',
  );
  if (maxDelayMs < initialDelayMs) {
    fail(
      'retry.maxDelayMs',
      `${maxDelayMs} ms is below retry.initialDelayMs (${initialDelayMs} ms)`,
      'Raise maxDelayMs or lower initialDelayMs.',
    );
  }
  if (r.retryIf !== undefined && typeof r.retryIf !== 'function') {
    fail('retry.retryIf', 'it is not a function', 'Pass (error, record) => boolean.');
  }
  return {
    // Infinity: a team that would rather hold a key than dead-letter (docs/ordering-and-dead-letters.md).
    maxAttempts:
      r.maxAttempts === Number.POSITIVE_INFINITY
        ? r.maxAttempts
        : integer(
            r.maxAttempts,
            defaults.maxAttempts.value,
            'retry.maxAttempts',
            1,
            1_000,
            '',
            `${defaults.maxAttempts.value}; Infinity retries without a limit`,
          ),
    initialDelayMs,
    maxDelayMs,
    factor: real(r.factor, defaults.factor.value, 'retry.factor', 1, 100),
    jitter: real(r.jitter, defaults.jitter.value, 'retry.jitter', 0, 1),
    maxAgeMs: integer(r.maxAgeMs, defaults.maxAgeMs.value, 'retry.maxAgeMs', 0, 3650 * DAY, ' ms'),
    retryIf: r.retryIf,
  };
}

export function resolveUnlockerOptions(
  value: OutboxUnlockerOptions | undefined,
): ResolvedUnlockerOptions {
  const intervalMs = section(value, 'unlocker').intervalMs;
  const fallback = OUTBOX_DEFAULTS.unlocker.intervalMs.value;
  return { intervalMs: integer(intervalMs, fallback, 'unlocker.intervalMs', 100, DAY, ' ms') };
}

export function resolveCleanerOptions(
  value: OutboxCleanerOptions | undefined,
): ResolvedCleanerOptions {
  const defaults = OUTBOX_DEFAULTS.cleaner;
  const c = section(value, 'cleaner');
  // The 0 below is never returned (undefined is handled first); the error text quotes it, and it
  // is kept as it was.
  const deadRetentionMs =
    c.deadRetentionMs === undefined || c.deadRetentionMs === null
      ? defaults.deadRetentionMs.value
      : integer(
          c.deadRetentionMs,
          0,
          'cleaner.deadRetentionMs',
          MINUTE,
          3650 * DAY,
          ' ms',
          'null: dead letters are kept until purged',
        );
  const deliveredRetentionMs = integer(
    c.deliveredRetentionMs,
    defaults.deliveredRetentionMs.value,
    'cleaner.deliveredRetentionMs',
    0,
    3650 * DAY,
    ' ms',
  );
  const archive = bool(c.archive, defaults.archive.value, 'cleaner.archive');
  if (archive && deliveredRetentionMs === 0) {
    // Retention 0 deletes a row in the settle that delivers it: the cleaner never sees it, so
    // the archive would silently miss every delivered message.
    fail(
      'cleaner.archive',
      'true needs delivered rows to stay until the cleaner moves them, but cleaner.deliveredRetentionMs is 0 (rows are deleted when delivered)',
      'Give cleaner.deliveredRetentionMs a retention above 0 (e.g. 60000), or leave archive off.',
    );
  }
  return {
    intervalMs: integer(
      c.intervalMs,
      defaults.intervalMs.value,
      'cleaner.intervalMs',
      100,
      DAY,
      ' ms',
    ),
    deliveredRetentionMs,
    deadRetentionMs,
    batchSize: integer(c.batchSize, defaults.batchSize.value, 'cleaner.batchSize', 1, 100_000),
    archive,
  };
}
