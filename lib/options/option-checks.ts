import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxMessages } from '../outbox.messages';
import type { KnownOptionKeys } from '../internal/did-you-mean';
import { refuseUnknownKeys } from '../internal/known-keys';

/** Throws; typed explicitly so that TypeScript narrows after a call. */
export type OptionFailure = (option: string, problem: string, fix: string) => never;

export type { KnownOptionKeys } from '../internal/did-you-mean';

/**
 * The checks every options resolver uses (the module's and each publisher's), so that all of
 * them reject bad values the same way: an `OutboxOptionsError` naming the option, the problem
 * and the fix.
 */
export class OptionChecks {
  constructor(private readonly subject: string) {}

  readonly fail: OptionFailure = (option, problem, fix) => {
    throw new OutboxOptionsError(
      OutboxMessages.optionInvalid(option, problem, fix, this.subject),
      option,
    );
  };

  readonly show = (value: unknown): string => {
    if (typeof value === 'number' || typeof value === 'bigint') return String(value);
    return JSON.stringify(value) ?? typeof value;
  };

  readonly integer = (
    value: unknown,
    fallback: number,
    option: string,
    min: number,
    max: number,
    unit = '',
    /** How the fix names the default, when it is not `fallback` itself. */
    defaultText = String(fallback),
  ): number => {
    if (value === undefined) return fallback;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
      this.fail(
        option,
        `${this.show(value)} is not a whole number from ${min} to ${max}${unit}`,
        `Set it within that range or leave it out for the default (${defaultText}).`,
      );
    }
    return value;
  };

  readonly real = (
    value: unknown,
    fallback: number,
    option: string,
    min: number,
    max: number,
  ): number => {
    if (value === undefined) return fallback;
    if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max) {
      this.fail(
        option,
        `${this.show(value)} is not a number from ${min} to ${max}`,
        `Set it within that range or leave it out for the default (${fallback}).`,
      );
    }
    return value;
  };

  /**
   * Rejects every key of `options` (and of its groups that are objects) that `known` does not
   * list, naming the key, its path and the option it most likely meant: a misspelt option would
   * otherwise be ignored and silently replaced by its default.
   */
  readonly knownKeys = (options: object, known: KnownOptionKeys): void => {
    refuseUnknownKeys(
      options,
      known,
      ({ path, suggestion, accepted }) =>
        new OutboxOptionsError(
          OutboxMessages.unknownOption(path, suggestion, accepted, this.subject),
          path,
        ),
    );
  };

  readonly bool = (value: unknown, fallback: boolean, option: string): boolean => {
    if (value === undefined) return fallback;
    if (typeof value !== 'boolean')
      this.fail(option, `${this.show(value)} is not a boolean`, 'Use true or false.');
    return value;
  };
}
