import type {
  OutboxBatchReport,
  OutboxObserver,
  OutboxPublishedRecord,
} from './outbox-observer.interface';
import type { OutboxRecord } from '../message/outbox-record.interface';

/**
 * One observer that forwards every hook to each of `observers`, in order, for the `observer`
 * option: e.g. `combineObservers(outboxMetrics, { onDeadLetter: (r) => alert(r.messageId) })`.
 * Every observer gets every event even when an earlier one throws; the errors are then thrown
 * together (an `AggregateError` when there are several) so that the dispatcher logs them.
 */
export function combineObservers(
  ...observers: readonly (OutboxObserver | undefined)[]
): OutboxObserver {
  const all = observers.filter((o): o is OutboxObserver => o !== undefined);
  const each = (call: (observer: OutboxObserver) => void): void => {
    const errors: unknown[] = [];
    for (const observer of all) {
      try {
        call(observer);
      } catch (error) {
        errors.push(error);
      }
    }
    if (errors.length === 1) throw errors[0];
    if (errors.length > 1)
      throw new AggregateError(errors, `${errors.length} outbox observers threw`);
  };
  // Hooks are called as methods (`observer.onBatch(...)`), so class-based observers keep `this`.
  // Required<>: a hook added to OutboxObserver must be forwarded here too, or this fails to compile.
  const combined: Required<OutboxObserver> = {
    onBatch: (report: OutboxBatchReport) => each((o) => o.onBatch?.(report)),
    onPublished: (records: readonly OutboxPublishedRecord[]) =>
      each((o) => o.onPublished?.(records)),
    onRetry: (record: OutboxRecord, error: unknown, delayMs: number) =>
      each((o) => o.onRetry?.(record, error, delayMs)),
    onDeadLetter: (record: OutboxRecord, error: unknown) =>
      each((o) => o.onDeadLetter?.(record, error)),
    onOutage: (error: unknown, pauseMs: number) => each((o) => o.onOutage?.(error, pauseMs)),
    onLeasesReleased: (count: number) => each((o) => o.onLeasesReleased?.(count)),
    onLeaseLost: (count: number, reason: string) => each((o) => o.onLeaseLost?.(count, reason)),
    onPurged: (status: 'delivered' | 'dead', count: number) =>
      each((o) => o.onPurged?.(status, count)),
  };
  return combined;
}
