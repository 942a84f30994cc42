import { DataSource } from 'typeorm';
import { OutboxOptionsError, type OutboxPublisher } from '../../lib';
import { resolveOutboxOptions } from '../../lib/options/resolve-outbox-options';

// ordering.sequence: off by default, a boolean, and refused where nobody would read the number.

const dataSource = new DataSource({ type: 'better-sqlite3', database: ':memory:' });
const publisher: OutboxPublisher = { publish: () => Promise.resolve([]) };

describe('ordering.sequence', () => {
  it('is off by default and on when asked, with or without ordering', () => {
    expect(resolveOutboxOptions({ dataSource, publisher }).ordering.sequence).toBe(false);
    expect(
      resolveOutboxOptions({ dataSource, publisher, ordering: { sequence: true } }).ordering
        .sequence,
    ).toBe(true);
    expect(
      resolveOutboxOptions({
        dataSource,
        publisher,
        ordering: { enabled: false, sequence: true },
      }).ordering.sequence,
    ).toBe(true);
  });

  it('refuses a value that is not a boolean, naming the option', () => {
    expect(() =>
      resolveOutboxOptions({ dataSource, publisher, ordering: { sequence: 'yes' as never } }),
    ).toThrow(OutboxOptionsError);
    expect(() =>
      resolveOutboxOptions({ dataSource, publisher, ordering: { sequence: 1 as never } }),
    ).toThrow(/ordering\.sequence/);
  });

  it("refuses delivery 'external', whose engine reads only the insert", () => {
    expect(() =>
      resolveOutboxOptions({ dataSource, delivery: 'external', ordering: { sequence: true } }),
    ).toThrow(/ordering\.sequence.*delivery 'external'/s);
  });
});
