/**
 * Writers committing messages through an enqueue-only app (L2, L3, T1): `writers` concurrent
 * loops, `perTransaction` messages per transaction (a key per message, 1 KiB JSON), at `rate`
 * messages per second in all or, without a rate, as fast as they can, for `durationMs` (or until
 * `signal` aborts).
 */
import type { DataSource } from 'typeorm';
import type { OutboxService } from '../../lib';
import { keyOf, payloadOf } from './databases';
import { nowMs } from './stats';
import { sleep } from '../../test/support/wait-for';

export interface WriterLoad {
  readonly ds: DataSource;
  readonly outbox: OutboxService;
  readonly writers: number;
  readonly perTransaction: number;
  /** Messages per second of all writers together; undefined: full rate. */
  readonly rate?: number;
  readonly durationMs: number;
  /** Ends the writers before `durationMs` (each finishes the transaction it is in). */
  readonly signal?: AbortSignal;
  /** Every commit's ids, and when it returned (this process's clock). */
  readonly onCommit?: (ids: readonly string[], at: number) => void;
}

/** Runs the writers; resolves to the messages committed. Sequence numbers start at 1. */
export async function runWriters(load: WriterLoad): Promise<number> {
  const start = nowMs();
  const end = start + load.durationMs;
  const intervalMs =
    load.rate === undefined ? 0 : (1_000 * load.writers * load.perTransaction) / load.rate;
  let seq = 0;
  let committed = 0;
  const stopped = (): boolean => load.signal?.aborted === true;
  const writer = async (index: number): Promise<void> => {
    let due = start + (index * intervalMs) / load.writers;
    while (nowMs() < end && due < end && !stopped()) {
      const wait = due - nowMs();
      if (wait > 0) await sleep(wait);
      if (stopped()) break;
      const messages = Array.from({ length: load.perTransaction }, () => {
        const s = ++seq;
        // A key per message (keys = never reached), as the outside measurement had.
        const key = keyOf(s, Number.MAX_SAFE_INTEGER);
        return {
          topic: 'bench',
          key,
          type: 'order.created',
          payload: JSON.parse(payloadOf(s, key)) as object,
        };
      });
      const ids = await load.ds.transaction((manager) => load.outbox.enqueue(messages, manager));
      committed += ids.length;
      load.onCommit?.(ids, nowMs());
      due += intervalMs;
      // A writer that fell behind skips the missed slots instead of bursting to catch up.
      if (intervalMs > 0 && due < nowMs() - intervalMs) due = nowMs();
    }
  };
  await Promise.all(Array.from({ length: load.writers }, (_, i) => writer(i)));
  return committed;
}
