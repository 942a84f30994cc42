/**
 * At most `limit` tasks run at once; the others wait in arrival order. A task still waiting
 * when its signal aborts is not started and rejects with the signal's reason.
 */
export class ConcurrencyLimit {
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly limit: number) {}

  async run<T>(task: () => Promise<T>, signal: AbortSignal): Promise<T> {
    await this.acquire(signal);
    try {
      return await task();
    } finally {
      this.running -= 1;
      this.waiting.shift()?.();
    }
  }

  private acquire(signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.reject(reasonOf(signal));
    if (this.running < this.limit) {
      this.running += 1;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const start = (): void => {
        signal.removeEventListener('abort', onAbort);
        this.running += 1;
        resolve();
      };
      const onAbort = (): void => {
        const at = this.waiting.indexOf(start);
        if (at >= 0) this.waiting.splice(at, 1);
        reject(reasonOf(signal));
      };
      this.waiting.push(start);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}

const reasonOf = (signal: AbortSignal): Error =>
  signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason));
