import { sleep } from '../wait-for';

/** Messages a real consumer received, with a way to wait for a count and to catch late extras. */
export class Collector<T> {
  readonly items: T[] = [];
  private waiters: { count: number; resolve: () => void }[] = [];

  push(item: T): void {
    this.items.push(item);
    this.waiters = this.waiters.filter((w) => {
      if (this.items.length < w.count) return true;
      w.resolve();
      return false;
    });
  }

  /** Resolves once `count` messages arrived; rejects after `timeoutMs` saying how many did. */
  async waitFor(count: number, timeoutMs = 10_000): Promise<T[]> {
    if (this.items.length < count) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => this.waiters.push({ count, resolve })),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () =>
              reject(
                new Error(
                  `expected ${count} message(s) at the consumer, got ${this.items.length} within ${timeoutMs} ms`,
                ),
              ),
            timeoutMs,
          );
        }),
      ]).finally(() => clearTimeout(timer));
    }
    return this.items;
  }

  /** Waits for `count`, then a quiet period, so duplicates and ghosts have time to show up. */
  async settle(count: number, quietMs = 300, timeoutMs = 10_000): Promise<T[]> {
    await this.waitFor(count, timeoutMs);
    await sleep(quietMs);
    return this.items;
  }

  clear(): void {
    this.items.length = 0;
  }
}
