import { randomUUID } from 'node:crypto';
import { pgSqlPort } from '../../lib/connections/pg';
import { outboxStoreConformance } from '../store/outbox-store.conformance';
import { describeWith } from '../support/services';
import { expectNever, waitFor } from '../support/wait-for';
import { pgPool, pgTarget, type PgPoolForTests } from './driver-targets';

// The node-postgres port: the store conformance suite on PostgreSQL, and its LISTEN, which the
// suite does not cover: a NOTIFY wakes it, and a lost connection is reported once.
outboxStoreConformance(pgTarget, ['postgres']);

describeWith(['postgres'], 'pg SQL port: LISTEN', () => {
  let pool: PgPoolForTests;
  let other: PgPoolForTests;
  beforeEach(() => {
    pool = pgPool(2);
    other = pgPool(2);
  });
  afterEach(async () => {
    await pool.end();
    await other.end();
  });

  const channel = () => `"outbox_orm_${randomUUID().replace(/-/g, '').slice(0, 12)}"`;
  const notify = (name: string) => other.query(`NOTIFY ${name}`);

  it('wakes on a NOTIFY to its channel, not on another channel, and stops on unlisten', async () => {
    const sql = pgSqlPort(pool);
    const name = channel();
    let wakes = 0;
    const unlisten = await sql.listen?.(
      name,
      () => (wakes += 1),
      () => undefined,
    );
    if (unlisten === undefined) throw new Error('the pg port has no listen');
    // Delivered in order: had the other channel's NOTIFY reached it, it would count first.
    await notify(channel());
    await notify(name);
    await waitFor('the NOTIFY', () => wakes === 1);
    await expectNever('a second wake-up', () => wakes > 1, 200);
    await unlisten();
    await notify(name);
    await expectNever('a wake-up after unlisten', () => wakes > 1, 300);
    // The client went back to the pool, clean.
    expect(pool.idleCount).toBe(pool.totalCount);
  });

  it("hands each notification's payload over ('' for none)", async () => {
    const sql = pgSqlPort(pool);
    const name = channel();
    const payloads: string[] = [];
    const unlisten = await sql.listen?.(
      name,
      (payload) => payloads.push(payload),
      () => undefined,
    );
    if (unlisten === undefined) throw new Error('the pg port has no listen');
    await notify(name);
    await other.query(`NOTIFY ${name}, 'outbox:members'`);
    await waitFor('both notifications', () => payloads.length === 2);
    expect(payloads).toEqual(['', 'outbox:members']);
    await unlisten();
  });

  it('reports once when the server ends the LISTEN connection, and the pool replaces it', async () => {
    const sql = pgSqlPort(pool);
    const name = channel();
    const lost: Error[] = [];
    const unlisten = await sql.listen?.(
      name,
      () => undefined,
      (error) => lost.push(error),
    );
    if (unlisten === undefined) throw new Error('the pg port has no listen');
    const { rows } = await other.query(
      'SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity WHERE query = $1',
      [`LISTEN ${name}`],
    );
    expect(rows).toEqual([{ ended: true }]);
    await waitFor('the loss reported', () => lost.length > 0);
    // 'error' and then 'end' both arrive: the second must not be reported again.
    await expectNever('a second report', () => lost.length > 1, 300);
    // Stopping after the loss is a no-op, and the pool closed the broken client.
    await unlisten();
    expect(lost).toHaveLength(1);
    await waitFor('the broken client closed', () => pool.totalCount === 0);
    // Listening again works on a fresh connection.
    let wakes = 0;
    const again = await sql.listen?.(
      name,
      () => (wakes += 1),
      () => undefined,
    );
    await notify(name);
    await waitFor('the NOTIFY on the new connection', () => wakes === 1);
    await again?.();
  });
});
