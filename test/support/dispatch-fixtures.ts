import type { DataSource } from 'typeorm';
import type { OutboxBatchReport, OutboxMessage, OutboxPublisher } from '../../lib';
import { dispatchTestApp, type HarnessOverrides } from './outbox-harness';
import type { OutboxScope } from './outbox-scope';
import type { RecordingPublisher } from './recording.publisher';

// What the dispatch suites (delivery, ordering, retries, faults, leases, shutdown) share: their
// message and the apps they open, all with the dispatch suites' defaults (dispatchTestApp).

/** An `order.event` on topic `orders`. */
export const msg = (
  key: string | null,
  payload: Record<string, unknown> = {},
  extra: Partial<OutboxMessage> = {},
): OutboxMessage => ({
  topic: 'orders',
  type: 'order.event',
  key,
  payload,
  ...extra,
});

/** Messages published over a series of batches. */
export const published = (reports: readonly OutboxBatchReport[]): number =>
  reports.reduce((n, r) => n + r.published, 0);

/** The apps a dispatch suite opens in `scope`, each closed after its test. */
export function dispatchApps(scope: OutboxScope) {
  return {
    /** An app with workers (started only when the test says so) on a fresh table. */
    boot: (publisher: RecordingPublisher, overrides: HarnessOverrides = {}) =>
      scope.open(dispatchTestApp(publisher, overrides)),
    /** The same on an existing `table`: several of them act as instances of one app. */
    dispatcherApp: (table: string, publisher: OutboxPublisher, overrides: HarnessOverrides = {}) =>
      scope.open({ ...dispatchTestApp(publisher, overrides), table }),
    /** An enqueue-only app on an existing `table`, on the scope's DataSource or another. */
    enqueuer: (table: string, options: HarnessOverrides = {}, dataSource?: DataSource) =>
      scope.open({ table, options, logger: ['error', 'fatal'] }, dataSource),
  };
}
