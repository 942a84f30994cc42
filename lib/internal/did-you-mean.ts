// The did-you-mean of every checker that names a key (module options, message fields, admin
// filters, CLI flags): one edit distance, one rule for a misplaced key.

/**
 * Every known key of an options object, by group: `''` is the top level, `'retry'` the object
 * under `retry`, and so on. Written as `{ key: true }` objects so that a resolver can declare
 * them with `satisfies Record<keyof SomeOptions, true>`: the build then fails when an options
 * interface gains a key that the list lacks.
 */
export type KnownOptionKeys = Readonly<Record<string, Readonly<Record<string, true>>>>;

/** `retry.maxAttempts`, or `batchSize` at the top level (group `''`). */
export const joinOptionPath = (group: string, key: string): string =>
  group === '' ? key : `${group}.${key}`;

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
        best = { path: joinOptionPath(candidateGroup, candidate), score };
      }
    }
  }
  return best?.path;
}
