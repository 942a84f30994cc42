import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxMessages } from '../outbox.messages';

/** Throws; typed explicitly so that TypeScript narrows after a call. */
export type OptionFailure = (option: string, problem: string, fix: string) => never;

/**
 * Every known key of an options object, by group: `''` is the top level, `'retry'` the object
 * under `retry`, and so on. Written as `{ key: true }` objects so that a resolver can declare
 * them with `satisfies Record<keyof SomeOptions, true>`: the build then fails when an options
 * interface gains a key that the list lacks.
 */
export type KnownOptionKeys = Readonly<Record<string, Readonly<Record<string, true>>>>;

const join = (group: string, key: string): string => (group === '' ? key : `${group}.${key}`);

/**
 * Optimal string alignment distance (Levenshtein plus adjacent transpositions), case-insensitive:
 * `maxAttemps`, `maxAtetmpts` and `maxattempts` are all one edit from `maxAttempts`.
 */
function editDistance(a: string, b: string): number {
  const s = a.toLowerCase();
  const t = b.toLowerCase();
  const d: number[][] = Array.from({ length: s.length + 1 }, (_, i) =>
    Array.from({ length: t.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  const at = (i: number, j: number): number => d[i]?.[j] ?? Infinity;
  for (let i = 1; i <= s.length; i++) {
    for (let j = 1; j <= t.length; j++) {
      const cost = s[i - 1] === t[j - 1] ? 0 : 1;
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && s[i - 1] === t[j - 2] && s[i - 2] === t[j - 1]) {
        best = Math.min(best, at(i - 2, j - 2) + 1);
      }
      (d[i] as number[])[j] = best;
    }
  }
  return at(s.length, t.length);
}

/**
 * The known option a mistyped or misplaced key most likely meant: the same name in another group
 * (`batchSize` at the top level means `dispatcher.batchSize`), else the nearest name by edit
 * distance, within about a third of its length. Ties go to the key's own group.
 */
export function suggestOption(
  group: string,
  key: string,
  known: KnownOptionKeys,
): string | undefined {
  const limit = Math.max(1, Math.floor(key.length / 3));
  let best: { path: string; score: number } | undefined;
  for (const [candidateGroup, keys] of Object.entries(known)) {
    for (const candidate of Object.keys(keys)) {
      const distance = editDistance(key, candidate);
      if (distance > limit) continue;
      // Sort by distance, then prefer the key's own group.
      const score = distance * 2 + (candidateGroup === group ? 0 : 1);
      if (best === undefined || score < best.score) {
        best = { path: join(candidateGroup, candidate), score };
      }
    }
  }
  return best?.path;
}

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
    for (const [group, keys] of Object.entries(known)) {
      const value: unknown = group === '' ? options : (options as Record<string, unknown>)[group];
      if (value === null || typeof value !== 'object' || Array.isArray(value)) continue;
      for (const key of Object.keys(value)) {
        if (Object.hasOwn(keys, key)) continue;
        const path = join(group, key);
        const suggestion = suggestOption(group, key, known);
        throw new OutboxOptionsError(
          OutboxMessages.unknownOption(
            path,
            suggestion,
            Object.keys(keys).map((k) => join(group, k)),
            this.subject,
          ),
          path,
        );
      }
    }
  };

  readonly bool = (value: unknown, fallback: boolean, option: string): boolean => {
    if (value === undefined) return fallback;
    if (typeof value !== 'boolean')
      this.fail(option, `${this.show(value)} is not a boolean`, 'Use true or false.');
    return value;
  };
}
