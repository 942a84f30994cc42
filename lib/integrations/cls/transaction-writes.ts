/**
 * The bridge writes (`EventBus.publish`, `EventEmitter2.emitAsync` of an `@OutboxEvent`) still
 * running in each guarded transaction, keyed by the transaction handle the adapter set.
 *
 * Module-level on purpose: `guardOutboxWrites()` wraps the adapter before the Nest container
 * exists, so the bridge (a provider) and the adapter can share nothing else. Keys are transaction
 * handles, made anew for every transaction, so apps in one process never meet here, and a
 * WeakMap lets a handle and its entry go together.
 */
const guarded = new WeakMap<object, TransactionWrites>();

/** The writes of one transaction: those still running, and those that failed. */
export class TransactionWrites {
  private readonly pending = new Set<Promise<unknown>>();
  private failed = false;
  private failure: unknown;

  /** Counts `write` in until it settles; a failure is kept for the end of the transaction. */
  track(write: Promise<unknown>): void {
    this.pending.add(write);
    void write.then(
      () => this.pending.delete(write),
      (error: unknown) => {
        this.pending.delete(write);
        if (!this.failed) {
          this.failed = true;
          this.failure = error;
        }
      },
    );
  }

  /**
   * At the end of the transaction's callback: how many writes were still running (each is
   * waited for first, so none touches the connection after the transaction ends) and the first
   * failure among all of them.
   */
  async settle(): Promise<{ unsettled: number; failed: boolean; failure: unknown }> {
    const running = [...this.pending];
    await Promise.allSettled(running);
    return { unsettled: running.length, failed: this.failed, failure: this.failure };
  }
}

/** Marks `tx` as guarded (once per transaction; a nested one shares its parent's entry). */
export function guardTransaction(tx: unknown): TransactionWrites | undefined {
  if (!isHandle(tx)) return undefined;
  let writes = guarded.get(tx);
  if (writes === undefined) {
    writes = new TransactionWrites();
    guarded.set(tx, writes);
  }
  return writes;
}

/** The writes of `tx`, when its transaction runs under `guardOutboxWrites()`. */
export function writesOf(tx: unknown): TransactionWrites | undefined {
  return isHandle(tx) ? guarded.get(tx) : undefined;
}

/** Ends the guard of `tx` when its outermost transaction is over. */
export function releaseTransaction(tx: unknown): void {
  if (isHandle(tx)) guarded.delete(tx);
}

function isHandle(tx: unknown): tx is object {
  return (typeof tx === 'object' && tx !== null) || typeof tx === 'function';
}
