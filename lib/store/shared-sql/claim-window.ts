/**
 * How long after its claim a key's head counts as in flight: a claim does not park the
 * followers of a key whose head was leased less than this ago, because its batch is about to
 * settle and free them (parking them then cost two more writes each, a park and a promotion:
 * with more batches in flight than keys free, every message went through both, bench P6 and
 * P14). A healthy batch settles well within it; a head leased longer ago is a slow publish or a
 * dispatcher gone, and its followers are parked as a stuck key's are, so that they cannot hold
 * up the keys behind them in the claim's window for longer than this.
 */
export const IN_FLIGHT_GRACE_MS = 1_000;

/**
 * How many due rows a claim looks at to find `limit` heads of their keys: room for followers
 * not parked yet, without growing with a stuck key's backlog (those get parked).
 */
export function claimWindow(limit: number): number {
  return limit * 2 + 50;
}

/**
 * The window of a claim after one that held no row of its window back (no key in flight, none
 * blocked, none contended): the batch and a margin. The wider window costs a claim the reading,
 * grouping and key lookups of rows it cannot take: in loops of claims and settles over 1 000
 * keys, a claim of 500 through the narrow one took 0.91 × the time on PostgreSQL, 0.71 × on
 * MariaDB and 0.91 × on SQLite (docs/performance.md, "The claim's window on every database").
 * When a claim does hold rows back, the next one looks at the wider window again, to find the
 * heads behind them. The dispatcher chooses (it sees every claim's outcome) and passes the
 * window in `ClaimOptions.window`.
 */
export function claimWindowAfter(limit: number, heldBack: boolean): number {
  return heldBack ? claimWindow(limit) : limit + 50;
}

/**
 * The window a store's claim reads: the one the caller chose (`ClaimOptions.window`), never
 * fewer rows than the batch, or the wider window.
 */
export function windowOf(options: { readonly limit: number; readonly window?: number }): number {
  return Math.max(options.limit, options.window ?? claimWindow(options.limit));
}

/**
 * The rows of a claim's window (in due order) that the claim looks at: those without a key,
 * and those of the window's first `limit` keys in the order their first rows are due. A batch
 * of `limit` rows takes at most `limit` keys, and when the window's keys are all free those are
 * the first ones. The rows of later keys are neither taken nor reported blocked: once the
 * window reached past the keys in flight, reporting them had their followers parked, then
 * promoted again one settle later (bench P14: a batch of 500 drained 0.94 × a batch of 200
 * before, 1.2 × after, on PostgreSQL).
 */
export function rowsOfFirstKeys<R extends { readonly message_key: string | null }>(
  window: readonly R[],
  limit: number,
): R[] {
  const keys = new Set<string>();
  return window.filter((row) => {
    if (row.message_key === null || keys.has(row.message_key)) return true;
    if (keys.size >= limit) return false;
    keys.add(row.message_key);
    return true;
  });
}
