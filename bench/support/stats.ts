/** Summary statistics of repeated measurements. */

export interface Summary {
  readonly median: number;
  readonly min: number;
  readonly max: number;
  readonly runs: readonly number[];
}

export function summarise(values: readonly number[]): Summary {
  const finite = values.filter((v) => Number.isFinite(v));
  if (finite.length === 0)
    return { median: Number.NaN, min: Number.NaN, max: Number.NaN, runs: [...values] };
  const sorted = [...finite].sort((a, b) => a - b);
  return {
    median: percentile(sorted, 50),
    min: sorted[0] as number,
    max: sorted[sorted.length - 1] as number,
    runs: [...values],
  };
}

/** Percentile with linear interpolation over an ascending array. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  const a = sorted[lo] as number;
  const b = sorted[hi] as number;
  return a + (b - a) * (rank - lo);
}

export function ratio(a: number, b: number): number {
  return b === 0 || !Number.isFinite(a) || !Number.isFinite(b) ? Number.NaN : a / b;
}

export const round = (value: number, digits = 2): number => {
  if (!Number.isFinite(value)) return value;
  const f = 10 ** digits;
  return Math.round(value * f) / f;
};

/** Milliseconds since the epoch with sub-millisecond resolution; comparable across processes. */
export const nowMs = (): number => performance.timeOrigin + performance.now();

/** An Error for whatever a callback was given (amqplib confirms pass non-Error values). */
export function toError(value: unknown): Error {
  if (value instanceof Error) return value;
  return new Error(typeof value === 'string' ? value : JSON.stringify(value));
}
