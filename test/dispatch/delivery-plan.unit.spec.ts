import { DataSource } from 'typeorm';
import type { OutboxModuleOptions, OutboxPublisher } from '../../lib';
import { logTailing } from '../../lib/log-tailing';
import { planDelivery } from '../../lib/dispatch/delivery-source.provider';
import { resolveOutboxOptions } from '../../lib/options/resolve-outbox-options';

// The one place the delivery mode is read: what each mode makes the dispatcher, the workers and
// enqueue do.

const dataSource = new DataSource({ type: 'better-sqlite3', database: ':memory:' });
const publisher: OutboxPublisher = { publish: () => Promise.resolve([]) };

const plan = (options: Partial<OutboxModuleOptions>, workers = true) =>
  planDelivery(resolveOutboxOptions({ dataSource, ...options }, workers));

describe('planDelivery', () => {
  it("'external': no source, no unlocker, the cleaner by age, JSON rows only", () => {
    const { source, ...duties } = plan({ delivery: 'external' });
    expect(source).toBeNull();
    expect(duties).toEqual({
      claims: 'leases',
      deliveredBy: 'external',
      publishes: false,
      unlocks: false,
      cleansBy: 'age',
      notifies: false,
      jsonRowsOnly: true,
    });
  });

  it("'poll': a source, the unlocker, the cleaner by status, NOTIFY when listening", () => {
    const { source, ...duties } = plan({ publisher });
    expect(source).toBeInstanceOf(Function);
    expect(duties).toEqual({
      claims: 'leases',
      deliveredBy: 'dispatcher',
      publishes: true,
      unlocks: true,
      cleansBy: 'status',
      notifies: true,
      jsonRowsOnly: false,
    });
    expect(plan({ publisher, dispatcher: { listen: false } }).notifies).toBe(false);
    // An owner of delivery partitions leases no row: nothing for an unlocker to free.
    expect(plan({ publisher, dispatcher: { claims: 'partitions' } }).unlocks).toBe(false);
  });

  it('logTailing(): a source and no NOTIFY (the log brings new rows, not the poll)', () => {
    const { source, notifies, unlocks, cleansBy } = plan({ publisher, delivery: logTailing() });
    expect(source).toBeInstanceOf(Function);
    expect({ notifies, unlocks, cleansBy }).toEqual({
      notifies: false,
      unlocks: true,
      cleansBy: 'status',
    });
  });

  it("logTailing() on delivery partitions: no NOTIFY and no unlocker (the log's reader leases no row)", () => {
    const { source, notifies, unlocks } = plan({
      publisher,
      delivery: logTailing(),
      dispatcher: { claims: 'partitions' },
    });
    expect(source).toBeInstanceOf(Function);
    expect({ notifies, unlocks }).toEqual({ notifies: false, unlocks: false });
  });

  it('the 0.2 spelling plans as the new one', () => {
    const { source: _old, ...old } = plan({ publisher, dispatcher: { observe: logTailing() } });
    const { source: _new, ...now } = plan({ publisher, delivery: logTailing() });
    expect(old).toEqual(now);
  });

  it('an enqueue-only instance publishes nothing', () => {
    expect(plan({}, false).publishes).toBe(false);
  });
});
