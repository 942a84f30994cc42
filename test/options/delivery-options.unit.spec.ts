import { DataSource } from 'typeorm';
import { OutboxOptionsError, type OutboxModuleOptions, type OutboxPublisher } from '../../lib';
import { logTailing } from '../../lib/log-tailing';
import { resolveOutboxOptions } from '../../lib/options/resolve-outbox-options';

// `delivery` is the one option for the delivery mode; the 0.2 pair it replaces
// (`delivery: 'dispatcher'`, `dispatcher.observe`) still resolves for one release, with a
// deprecation that says what to write instead.

const dataSource = new DataSource({ type: 'better-sqlite3', database: ':memory:' });
const publisher: OutboxPublisher = { publish: () => Promise.resolve([]) };

function errorOf(options: OutboxModuleOptions): OutboxOptionsError {
  try {
    resolveOutboxOptions(options);
  } catch (error) {
    if (error instanceof OutboxOptionsError) return error;
    throw error;
  }
  throw new Error('expected an OutboxOptionsError');
}

describe('delivery', () => {
  it("is 'poll' when left out, with nothing to deprecate", () => {
    const resolved = resolveOutboxOptions({ dataSource, publisher });
    expect(resolved.delivery).toBe('poll');
    expect(resolved.deprecation).toBeNull();
  });

  it('takes the log observer of logTailing() itself', () => {
    const observer = logTailing({ sweepIntervalMs: 2_000 });
    const resolved = resolveOutboxOptions({ dataSource, publisher, delivery: observer });
    expect(resolved.delivery).toBe(observer);
    expect(resolved.deprecation).toBeNull();
  });

  it('refuses an object that logTailing() did not make, listing the modes', () => {
    const error = errorOf({
      dataSource,
      publisher,
      delivery: { kind: 'log' } as unknown as OutboxModuleOptions['delivery'],
    });
    expect(error.option).toBe('delivery');
    expect(error.message).toMatch(/is not a delivery mode\. Use 'poll'/);
  });

  it("takes log tailing with dispatcher.claims: 'partitions' (the log's reader owns every partition)", () => {
    const observer = logTailing();
    const resolved = resolveOutboxOptions({
      dataSource,
      publisher,
      delivery: observer,
      dispatcher: { claims: 'partitions', publishWindow: 500 },
    });
    expect(resolved.delivery).toBe(observer);
    expect(resolved.dispatcher.claims).toBe('partitions');
    expect(resolved.dispatcher.publishWindow).toBe(500);
  });

  it("refuses dispatcher.publishWindow beside dispatcher.claims: 'leases', and one out of range, saying how to fix it; left out, claims is 'partitions' with a window", () => {
    const leases = errorOf({
      dataSource,
      publisher,
      dispatcher: { claims: 'leases', publishWindow: 1_000 },
    });
    expect(leases.option).toBe('dispatcher.publishWindow');
    expect(leases.message).toMatch(
      /leave dispatcher\.claims out or set it to 'partitions'.*or remove publishWindow/,
    );
    // The window asks for partitions where the mode is left out (a database without them is
    // refused at bootstrap, test/dispatch/delivery-claims.spec.ts).
    expect(
      resolveOutboxOptions({ dataSource, publisher, dispatcher: { publishWindow: 100 } }).dispatcher
        .claims,
    ).toBe('partitions');
    // Left out without a window: decided at bootstrap, by the table.
    expect(resolveOutboxOptions({ dataSource, publisher }).dispatcher.claims).toBeNull();
    const zero = errorOf({
      dataSource,
      publisher,
      dispatcher: { claims: 'partitions', publishWindow: 0 },
    });
    expect(zero.option).toBe('dispatcher.publishWindow');
    // The default is no window: the fix must not offer 0, the value it refuses.
    expect(zero.message).toMatch(
      /leave it out for the default \(none: each batch publishes on its own\)/,
    );
    expect(zero.message).not.toMatch(/default \(0\)/);
    const resolved = resolveOutboxOptions({
      dataSource,
      publisher,
      dispatcher: { claims: 'partitions', publishWindow: 1_000 },
    }).dispatcher;
    expect(resolved.publishWindow).toBe(1_000);
    expect(
      resolveOutboxOptions({ dataSource, publisher, dispatcher: { claims: 'partitions' } })
        .dispatcher.publishWindow,
    ).toBeUndefined();
  });

  it('refuses dispatcher.observe beside the new spelling: the mode is said once', () => {
    for (const delivery of ['poll', logTailing()] as const) {
      const error = errorOf({
        dataSource,
        publisher,
        delivery,
        dispatcher: { observe: logTailing() },
      });
      expect(error.option).toBe('dispatcher.observe');
      expect(error.message).toMatch(/Remove dispatcher.observe/);
    }
  });
});

describe('the 0.2 delivery options, deprecated', () => {
  it("reads delivery: 'dispatcher' as 'poll' and says to write 'poll'", () => {
    const resolved = resolveOutboxOptions({ dataSource, publisher, delivery: 'dispatcher' });
    expect(resolved.delivery).toBe('poll');
    expect(resolved.deprecation).toMatch(
      /delivery: 'dispatcher' is deprecated and will be removed in 0\.4\. Write delivery: 'poll'/,
    );
  });

  it('reads dispatcher.observe: logTailing() as delivery: logTailing()', () => {
    const observer = logTailing();
    for (const delivery of [undefined, 'dispatcher'] as const) {
      const resolved = resolveOutboxOptions({
        dataSource,
        publisher,
        ...(delivery === undefined ? {} : { delivery }),
        dispatcher: { observe: observer },
      });
      expect(resolved.delivery).toBe(observer);
      expect(resolved.deprecation).toMatch(
        /dispatcher\.observe: logTailing\(…\) is deprecated.*Write delivery: logTailing\(…\) \(the same logTailing\(\) call\) and remove dispatcher\.observe/,
      );
    }
  });

  it("reads dispatcher.observe: 'poll' as the default", () => {
    const resolved = resolveOutboxOptions({
      dataSource,
      publisher,
      dispatcher: { observe: 'poll' },
    });
    expect(resolved.delivery).toBe('poll');
    expect(resolved.deprecation).toMatch(/remove dispatcher\.observe/);
  });

  it("takes 'partitions' with a log observer given the 0.2 way, saying what to write instead", () => {
    const observer = logTailing();
    const resolved = resolveOutboxOptions({
      dataSource,
      publisher,
      dispatcher: { observe: observer, claims: 'partitions' },
    });
    expect(resolved.delivery).toBe(observer);
    expect(resolved.dispatcher.claims).toBe('partitions');
    expect(resolved.deprecation).toMatch(/remove dispatcher\.observe/);
  });

  it('refuses a dispatcher.observe that is neither mode', () => {
    const error = errorOf({
      dataSource,
      publisher,
      dispatcher: { observe: 'log' as 'poll' },
    });
    expect(error.option).toBe('dispatcher.observe');
    expect(error.message).toMatch(/write the top-level delivery: 'poll'/);
  });
});
