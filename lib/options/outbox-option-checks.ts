import { OptionChecks, type OptionFailure } from './option-checks';

export const MINUTE = 60_000;
export const HOUR = 3_600_000;
export const DAY = 86_400_000;

/** The checks of `OutboxModule`'s options: every failure names the module. */
export const checks = new OptionChecks('OutboxModule');
export const fail: OptionFailure = checks.fail;

/** A group's object (`dispatcher: { ... }`), or `{}` when it is left out for the defaults. */
export function section<T extends object>(value: T | undefined, option: string): Partial<T> {
  if (value === undefined) return {};
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    fail(
      option,
      `${checks.show(value)} is not an object`,
      'Pass an object or leave it out for the defaults.',
    );
  }
  return value;
}
