import { OutboxOptionsError } from '../errors/outbox-options.error';
import type { LogTailingOptions } from './log-tailing.options';

/** What `logTailing()` resolved for every database, defaults applied. */
export interface LogTailingSettings {
  /** The options as given, for the ones a database reads itself. */
  readonly options: LogTailingOptions;
  readonly standbyRetryMs: number;
  readonly readerTimeoutMs: number;
  readonly maxTransactionInserts: number;
}

/** The option's value, else `fallback`; throws `OutboxOptionsError` unless a positive integer. */
export function positiveOption(
  value: number | undefined,
  fallback: number,
  name: keyof LogTailingOptions,
): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new OutboxOptionsError(
      `logTailing({ ${name} }): ${String(value)} is not a positive whole number.`,
      `delivery.${name}`,
    );
  }
  return value;
}

/** The option's value, else `fallback`; throws `OutboxOptionsError` unless a whole number ≥ 0. */
export function notNegativeOption(
  value: number | undefined,
  fallback: number,
  name: keyof LogTailingOptions,
): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new OutboxOptionsError(
      `logTailing({ ${name} }): ${String(value)} is not a whole number of 0 or more.`,
      `delivery.${name}`,
    );
  }
  return value;
}
