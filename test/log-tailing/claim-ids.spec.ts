import { TEST_DATABASES } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';

// The store's lease by id (claimIds), which log tailing builds on: on each database with a log,
// it leases only what a claim could take, and under ordering only a prefix of each key's queue,
// so that the log's path and the table's never publish out of order or twice.

for (const db of TEST_DATABASES.filter((d) => d.name !== 'sqlite')) {
  describeWith(db.service === null ? [] : [db.service], `claimIds on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'lt_ci' });

    async function rows(options = {}) {
      const h = await scope.open({ options, tablePrefix: 'lt_ci' });
      const [a1, a2, a3] = await h.enqueue([
        msg('a', { n: 1 }),
        msg('a', { n: 2 }),
        msg('a', { n: 3 }),
      ]);
      const [b1] = await h.enqueue([msg('b')]);
      const [free] = await h.enqueue([msg(null)]);
      const byMessage = new Map((await h.rows()).map((r) => [r.messageId, r.id]));
      const id = (messageId: string | undefined): string => byMessage.get(messageId ?? '') ?? '';
      return { h, ids: { a1: id(a1), a2: id(a2), a3: id(a3), b1: id(b1), free: id(free) } };
    }

    it('leases a prefix of each key, nothing behind an earlier undelivered row, and reports ids the table does not show', async () => {
      const { h, ids } = await rows();
      const store = h.store;
      if (store.claimIds === undefined) throw new Error(`no claimIds on ${db.name}`);
      const lease = { owner: 'tailer', leaseMs: 10_000 };
      // a2 alone: a1 is earlier and pending, so nothing; an id never written is unseen.
      const missing = String(Number(ids.free) + 1_000_000);
      const none = await store.claimIds({ ...lease, ids: [ids.a2, ids.a3, missing] });
      expect(none.records).toEqual([]);
      expect(none.unseen).toEqual([missing]);
      // a1 and a2 together (a prefix), b1 and the keyless one: all four, with one attempt each.
      const some = await store.claimIds({ ...lease, ids: [ids.a1, ids.a2, ids.b1, ids.free] });
      expect(some.records.map((r) => r.id).sort()).toEqual(
        [ids.a1, ids.a2, ids.b1, ids.free].sort(),
      );
      expect(some.records.every((r) => r.attempts === 1)).toBe(true);
      // Leased now: asked again (a replay), nothing is leased twice; a3 waits behind a1 and a2.
      const again = await store.claimIds({ ...lease, ids: [ids.a1, ids.a2, ids.a3, ids.b1] });
      expect(again.records).toEqual([]);
      const leased = (await h.rows()).filter((r) => r.lockedBy === 'tailer').map((r) => r.id);
      expect(leased.sort()).toEqual([ids.a1, ids.a2, ids.b1, ids.free].sort());
    });

    it("reports when a key's head that holds its rows back falls due: a retry another process settled leaves no timer here", async () => {
      const { h, ids } = await rows();
      const store = h.store;
      if (store.claimIds === undefined) throw new Error(`no claimIds on ${db.name}`);
      // a1 backs off for 3 s (a retry settled elsewhere); a2 and a3 are due but wait behind it.
      await scope.ds.query(
        db.name === 'postgres'
          ? `UPDATE "${h.table}" SET available_at = now() + interval '3 seconds' WHERE id = $1`
          : `UPDATE \`${h.table}\` SET available_at = NOW(6) + INTERVAL 3 SECOND WHERE id = ?`,
        [ids.a1],
      );
      const held = await store.claimIds({
        owner: 'tailer',
        leaseMs: 10_000,
        ids: [ids.a2, ids.a3],
      });
      expect(held.records).toEqual([]);
      expect(held.notDueForMs).toBeGreaterThan(1_000);
      expect(held.notDueForMs).toBeLessThanOrEqual(3_000);
      // A key held by a row due now (pending, unleased) has nothing to wait for.
      const free = await store.claimIds({ owner: 'tailer', leaseMs: 10_000, ids: [ids.b1] });
      expect(free.notDueForMs).toBeUndefined();
    });

    it("reports when the head of a key whose rows a sweep parked falls due: the log's rows are waiting, not pending, and still wait for that head", async () => {
      const { h, ids } = await rows();
      const store = h.store;
      if (store.claimIds === undefined) throw new Error(`no claimIds on ${db.name}`);
      // a1 backs off for 3 s (a retry another process settled), and a sweep that met a2 and a3
      // behind it parked them: the log then names rows that are waiting.
      const q = (sql: string) => (db.name === 'postgres' ? sql.replace(/`/g, '"') : sql);
      await scope.ds.query(
        q(
          db.name === 'postgres'
            ? `UPDATE \`${h.table}\` SET available_at = now() + interval '3 seconds' WHERE id = $1`
            : `UPDATE \`${h.table}\` SET available_at = NOW(6) + INTERVAL 3 SECOND WHERE id = ?`,
        ),
        [ids.a1],
      );
      await scope.ds.query(
        q(
          `UPDATE \`${h.table}\` SET status = 'waiting' WHERE id IN (${db.name === 'postgres' ? '$1, $2' : '?, ?'})`,
        ),
        [ids.a2, ids.a3],
      );
      const held = await store.claimIds({
        owner: 'tailer',
        leaseMs: 10_000,
        ids: [ids.a2, ids.a3],
      });
      expect(held.records).toEqual([]);
      // Without it, the sweep that parked them found nothing due and would look again only at
      // its next poll (the log's sweep: seconds, or an hour where it is turned off).
      expect(held.notDueForMs).toBeGreaterThan(1_000);
      expect(held.notDueForMs).toBeLessThanOrEqual(3_000);
    });

    it('without ordering, leases every due row it is given', async () => {
      const { h, ids } = await rows({ ordering: { enabled: false } });
      const store = h.store;
      if (store.claimIds === undefined) throw new Error(`no claimIds on ${db.name}`);
      const all = await store.claimIds({ owner: 'tailer', leaseMs: 10_000, ids: [ids.a3, ids.a2] });
      expect(all.records.map((r) => r.id).sort()).toEqual([ids.a2, ids.a3].sort());
    });
  });
}
