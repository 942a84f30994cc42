import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { OnOutboxMessage, type OutboxHandlerMessage } from '../../lib';
import { OWNER_TOKEN_VERSION } from '../../lib/store/shared-sql/owner-leases';
import { openLocalApp } from '../local/local-app';
import { msg } from '../support/dispatch-fixtures';
import { useOutboxScope } from '../support/outbox-scope';
import type { Instance } from '../support/outbox-harness';
import { describeSource, POLL_RUN_DATABASES, SOURCE_CASES, useSource } from '../support/sources';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { sleep, waitFor } from '../support/wait-for';
import { CLAIM_LOOP } from '../support/test-claims';

// Lease renewal (docs/delivery.md, "Lease renewal"): a batch still publishing renews its lease,
// so a publish three times as long as the lease is delivered once and no other dispatcher
// claims it meanwhile; a renewal fenced out by a newer owner stops the publish and its settle
// changes nothing of that owner's; without renewal the lease lapses as it always did.

const LEASE_MS = 1_500;
/** A publish three times the lease. */
const SLOW_MS = 3 * LEASE_MS;
/** Renewal on (the default), every 500 ms, with a publish allowed to outlast the lease. */
const RENEWED = {
  dispatcher: { leaseMs: LEASE_MS, publishTimeoutMs: 10_000, dbTimeoutMs: 300 },
};

/** The table's name as a statement of `ds` writes it. */
function quoted(ds: DataSource, table: string): string {
  return ds.options.type === 'mariadb' || ds.options.type === 'mysql'
    ? `\`${table}\``
    : `"${table}"`;
}

/** The lease columns of every row, in id order. */
async function leases(
  ds: DataSource,
  table: string,
): Promise<{ token: string | null; by: string | null }[]> {
  const rows: { token: string | null; owner: string | null }[] = await ds.query(
    `SELECT ${ds.options.type === 'postgres' ? 'lock_token::text' : 'lock_token'} AS token, locked_by AS owner FROM ${quoted(ds, table)} ORDER BY id`,
  );
  return rows.map((r) => ({ token: r.token, by: r.owner }));
}

/**
 * A takeover, as another dispatcher's claim after the lease expired would write it: a new token
 * and owner on every leased row. Returns the new token.
 */
async function takeOver(ds: DataSource, table: string): Promise<string> {
  const token = randomUUID();
  const cast = ds.options.type === 'postgres' ? '$1::uuid' : '?';
  await ds.query(
    `UPDATE ${quoted(ds, table)} SET lock_token = ${cast}, locked_by = 'newer-owner' WHERE lock_token IS NOT NULL`,
    [token],
  );
  return token;
}

for (const db of POLL_RUN_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `lease renewal on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_renew', options: CLAIM_LOOP });
    let table: string;

    beforeEach(async () => {
      table = await scope.table();
    });

    it('delivers a publish three times as long as the lease exactly once, and no other dispatcher claims it meanwhile', async () => {
      // Started, so that it holds its owner lock (PostgreSQL, MariaDB) and its leases name it.
      const first = await scope.instance(table, 'first', { ...RENEWED, autoStart: true });
      first.publisher.slow(SLOW_MS);
      const [id] = await first.enqueue(msg('k', { n: 1 }));
      const started = performance.now();
      await waitFor('the publish to start', () => first.publisher.calls.length === 1);
      // SQLite runs one dispatcher per database; the servers get a second on the same table,
      // started once the first holds the message, with its owner-lock watch (takeover after a
      // crash) running.
      const second: Instance | undefined =
        db.name === 'sqlite'
          ? undefined
          : await scope.instance(table, 'second', { ...RENEWED, autoStart: true });
      // Past the lease twice over, the row is still the first dispatcher's, renewed: neither
      // the other's claims, nor its unlocker, nor its takeover watch took it.
      while (performance.now() - started < 2 * LEASE_MS + 500) {
        if (second !== undefined) {
          await second.dispatcher.drain();
          expect(await second.unlocker.runOnce()).toBe(0);
        }
        await sleep(100);
      }
      expect((await first.rows()).map((r) => [r.status, r.lockedBy])).toEqual([
        ['pending', 'first'],
      ]);
      if (second !== undefined) {
        // An owner lease (the first holds its owner lock), which the takeover watch leaves alone.
        const [lease] = await leases(scope.ds, table);
        expect(lease?.token?.charAt(14)).toBe(OWNER_TOKEN_VERSION);
      }
      await waitFor(
        'the slow message delivered',
        async () => (await first.rows()).every((r) => r.status === 'delivered'),
        { timeoutMs: 10_000, intervalMs: 50 },
      );
      expect(performance.now() - started).toBeGreaterThanOrEqual(SLOW_MS - 50);
      expect(first.reports.filter((r) => r.claimed > 0)).toEqual([
        expect.objectContaining({ claimed: 1, published: 1, fenced: 0, released: 0 }),
      ]);
      expect(first.publisher.sentIds).toEqual([id]);
      expect(first.publisher.calls).toHaveLength(1);
      expect(second?.publisher.calls ?? []).toEqual([]);
      const [row] = await first.rows();
      expect(row).toMatchObject({ status: 'delivered', attempts: 1 });
      await second?.dispatcher.drain();
      expect(second?.publisher.calls ?? []).toEqual([]);
    });

    it('delivers to an in-process handler that runs three times as long as the lease exactly once', async () => {
      const calls: string[] = [];
      @Injectable()
      class SlowLedger {
        @OnOutboxMessage('ledger')
        async on(message: OutboxHandlerMessage): Promise<void> {
          calls.push(message.messageId);
          await sleep(SLOW_MS);
        }
      }
      const app = await openLocalApp(scope.ds, { handlers: [SlowLedger], options: RENEWED });
      try {
        const [id] = await app.commit([
          { topic: 'ledger', key: 'acct', type: 'entry', payload: {} },
        ]);
        const report = await app.dispatcher.runOnce();
        expect(report).toMatchObject({ claimed: 1, published: 1, fenced: 0 });
        expect(report.durationMs).toBeGreaterThanOrEqual(SLOW_MS - 50);
        expect(calls).toEqual([id]);
        expect((await app.rows()).map((r) => [r.status, r.attempts])).toEqual([['delivered', 1]]);
      } finally {
        await app.close();
      }
    });

    it('without renewal, the lease lapses: a publish longer than the lease is cut at its end', async () => {
      const d = await scope.instance(table, 'unrenewed', {
        dispatcher: {
          leaseMs: LEASE_MS,
          publishTimeoutMs: 1_000,
          dbTimeoutMs: 200,
          leaseRenewal: false,
        },
      });
      d.publisher.slow(SLOW_MS);
      await d.enqueue(msg('k', { n: 1 }));
      const started = performance.now();
      const report = await d.dispatcher.runOnce();
      // Never past the lease: aborted by its deadline, and retried later.
      expect(performance.now() - started).toBeLessThan(LEASE_MS);
      expect(report).toMatchObject({ claimed: 1, published: 0, retried: 1 });
      expect(d.publisher.sentIds).toEqual([]);
      const [row] = await d.rows();
      expect(row).toMatchObject({ status: 'pending', attempts: 1, lockedBy: null });
      expect(row?.lastError).toMatch(/timed out|timeout/i);
    });

    it("without renewal, a publish that outlives a takeover goes on and its settle is refused: the newer owner's state stays", async () => {
      const d = await scope.instance(table, 'unrenewed', {
        dispatcher: {
          leaseMs: LEASE_MS,
          publishTimeoutMs: 1_000,
          dbTimeoutMs: 200,
          leaseRenewal: false,
        },
      });
      d.publisher.slow(800);
      const [id] = await d.enqueue(msg('k', { n: 1 }));
      const run = d.dispatcher.runOnce();
      await waitFor('the publish to start', () => d.publisher.calls.length === 1);
      const newer = await takeOver(scope.ds, table);
      const report = await run;
      // The old behaviour: the publish is not stopped (the message went out), the settle is.
      expect(d.publisher.sentIds).toEqual([id]);
      expect(report).toMatchObject({ claimed: 1, published: 1, fenced: 1 });
      expect(await leases(scope.ds, table)).toEqual([{ token: newer, by: 'newer-owner' }]);
      expect((await d.rows()).map((r) => r.status)).toEqual(['pending']);
    });

    it("with renewal, a renewal fenced out by a takeover stops the publish, and its settle leaves the newer owner's state", async () => {
      const lost: number[] = [];
      const d = await scope.instance(table, 'renewed', {
        ...RENEWED,
        observer: { onLeaseLost: (count) => lost.push(count) },
      });
      d.publisher.slow(SLOW_MS);
      await d.enqueue([msg('a', { n: 1 }), msg('b', { n: 2 })]);
      const started = performance.now();
      const run = d.dispatcher.runOnce();
      await waitFor('the publish to start', () => d.publisher.calls.length === 1);
      const newer = await takeOver(scope.ds, table);
      const report = await run;
      // Abandoned at the next renewal (every 500 ms), long before the publish would have ended.
      expect(performance.now() - started).toBeLessThan(SLOW_MS - LEASE_MS);
      expect(d.publisher.sentIds).toEqual([]);
      expect(report).toMatchObject({ claimed: 2, published: 0, fenced: 2 });
      expect(lost).toEqual([2]);
      expect(await leases(scope.ds, table)).toEqual([
        { token: newer, by: 'newer-owner' },
        { token: newer, by: 'newer-owner' },
      ]);
      // The claim's attempt stays counted: nothing gave it back under the newer owner's lease.
      expect((await d.rows()).map((r) => [r.status, r.attempts])).toEqual([
        ['pending', 1],
        ['pending', 1],
      ]);
    });
  });
}

// On either source (the table's poll, or the database's log: test/support/sources.ts).
for (const source of SOURCE_CASES) {
  describeSource(source, 'lease renewal', () => {
    const scope = useOutboxScope(source.db, {
      tablePrefix: 'outbox_renew_src',
      options: CLAIM_LOOP,
    });
    const src = useSource(scope, source);

    it('delivers a publish three times as long as the lease exactly once', async () => {
      const publisher = new RecordingPublisher().slow(SLOW_MS);
      const h = await src.boot(publisher, RENEWED);
      const [id] = await h.commit([msg('k', { n: 1 })]);
      await src.deliver(
        h,
        'the slow message delivered',
        async () => (await h.rows()).every((r) => r.status === 'delivered'),
        20_000,
      );
      expect(publisher.sentIds).toEqual([id]);
      expect(publisher.calls).toHaveLength(1);
      expect((await h.rows()).map((r) => [r.status, r.attempts])).toEqual([['delivered', 1]]);
      expect(h.reports.reduce((n, r) => n + r.fenced + r.released, 0)).toBe(0);
    });
  });
}
