/** Two variants of one operation timed against each other in paired, interleaved blocks (P5, P12). */
import { percentile } from './stats';

export interface PairedTimes {
  /** Mean milliseconds per call of the first variant. */
  readonly first: number;
  /** Mean milliseconds per call of the second variant. */
  readonly second: number;
  /** Median over blocks of the paired time ratio first ÷ second. */
  readonly ratio: number;
}

/**
 * Runs `first` and `second` `total` times each (rounded up to whole blocks) in alternating blocks
 * of `block` calls, in ABBA order so that neither always goes first, after a warm-up of up to 20
 * calls of each. Each pair of adjacent blocks gives one ratio: drift of the machine (another
 * process, a checkpoint, autovacuum) hits both sides of a pair alike, so their median is steadier
 * than the ratio of the two means.
 */
export async function pairedBlocks(
  first: () => Promise<void>,
  second: () => Promise<void>,
  total: number,
  block: number,
): Promise<PairedTimes> {
  for (const variant of [first, second])
    for (let i = 0; i < Math.min(block, 20); i++) await variant();
  const timeBlock = async (variant: () => Promise<void>): Promise<number> => {
    const t = performance.now();
    for (let i = 0; i < block; i++) await variant();
    return performance.now() - t;
  };
  let a = 0;
  let b = 0;
  const ratios: number[] = [];
  for (let done = 0, k = 0; done < total; done += block, k++) {
    let ta: number;
    let tb: number;
    if (k % 2 === 0) {
      ta = await timeBlock(first);
      tb = await timeBlock(second);
    } else {
      tb = await timeBlock(second);
      ta = await timeBlock(first);
    }
    a += ta;
    b += tb;
    ratios.push(ta / tb);
  }
  const count = Math.ceil(total / block) * block;
  return {
    first: a / count,
    second: b / count,
    ratio: percentile(
      [...ratios].sort((x, y) => x - y),
      50,
    ),
  };
}
