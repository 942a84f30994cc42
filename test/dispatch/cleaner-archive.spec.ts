import { Test } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import { OutboxModule, OutboxTableMissingError, type OutboxMessage } from '../../lib';
import { ensureOutboxArchiveTable } from '../../lib/schema';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import type { OutboxStore } from '../../lib/store/ports/outbox-store.port';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { readArchive, readAttempts, TEST_DATABASES } from '../support/databases';
import { ageRows } from '../support/db-clock';
import { dispatchApps, msg } from '../support/dispatch-fixtures';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { waitFor } from '../support/wait-for';

// cleaner.archive: rows past their retention move to `<table>_archive` in the transaction that
// deletes them, with what was sent and how it ended; nothing else changes about the cleaner.

const MINUTE = 60_000;

/**
 * A store on `table` whose transactions run their statements and then wait for `release()`
 * before they commit (`held` resolves when one has got there), so a test can hold one
 * uncommitted while another transaction meets its locks.
 */
async function storeHoldingCommit(ds: DataSource, table: string) {
  const {
    transactionOpening: _opening,
    transactionStatement: _statement,
    ...port
  } = typeormSqlPort(ds);
  let reached = (): void => undefined;
  let release = (): void => undefined;
  const held = new Promise<void>((resolve) => (reached = resolve));
  const released = new Promise<void>((resolve) => (release = resolve));
  const holding: SqlPort = {
    ...port,
    async transaction(work) {
      return port.transaction(async (tx) => {
        const value = await work(tx);
        reached();
        await released;
        return value;
      });
    },
  };
  const store: OutboxStore = await createOutboxStore(
    holding,
    { tableName: table, schema: null },
    { enabled: false, notify: false },
  );
  return { store, held, release };
}

/** Whether a statement on `table` waits for a lock another transaction holds. */
async function waitsForLock(ds: DataSource, table: string): Promise<boolean> {
  const postgres = ds.options.type === 'postgres';
  const sql = postgres
    ? `SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`
    : `SELECT count(*) AS n FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE ?`;
  const [row] = await ds.query<{ n: string | number }[]>(sql, [
    postgres ? `%"${table}"%` : `%\`${table}\`%`,
  ]);
  return Number(row?.n ?? 0) > 0;
}

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `cleaner archive on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_ar' });
    const { boot, dispatcherApp } = dispatchApps(scope);

    /** A fresh app whose table has its archive (made before the module boots). */
    async function bootArchiving(publisher: RecordingPublisher, deadRetentionMs: number | null) {
      const table = await scope.table('outbox_ar');
      await ensureOutboxArchiveTable(scope.ds, { tableName: table });
      return dispatcherApp(table, publisher, {
        cleaner: { archive: true, deliveredRetentionMs: MINUTE, deadRetentionMs },
        retry: { initialDelayMs: 0, maxDelayMs: 0, jitter: 0 },
      });
    }

    it('moves delivered and dead rows past retention into the archive, as they were, and deletes their history', async () => {
      const publisher = new RecordingPublisher();
      const h = await bootArchiving(publisher, MINUTE);
      const ids = await h.commit([
        msg('a', { n: 1 }, { headers: { tenant: 't1' } }),
        msg('a', { n: 2 }),
        msg(null, { n: 3 }),
        msg('flaky', { n: 4 }),
        msg('poison', { n: 5 }),
      ]);
      publisher.fail(ids[3] as string, 'retryable', { times: 1 });
      publisher.fail(ids[4] as string, 'permanent');
      await h.runUntilIdle();
      await h.runUntilIdle();
      const before = await h.rows();
      expect(before.map((r) => r.status)).toEqual([
        'delivered',
        'delivered',
        'delivered',
        'delivered',
        'dead',
      ]);
      expect((await readAttempts(scope.ds, h.table)).length).toBeGreaterThan(0);

      // Nothing is due yet: nothing moves.
      expect(await h.cleaner.runOnce()).toEqual({ delivered: 0, dead: 0 });
      expect(await readArchive(scope.ds, h.table)).toEqual([]);

      await ageRows(scope.ds, h.table, 'delivered', 120);
      await ageRows(scope.ds, h.table, 'dead', 120);
      expect(await h.cleaner.runOnce()).toEqual({ delivered: 4, dead: 1 });

      expect(await h.rows()).toEqual([]);
      expect(await readAttempts(scope.ds, h.table)).toEqual([]);
      // Each as the outbox held it (the archive's own order is the cut-off's: by delivered_at).
      const archived = (await readArchive(scope.ds, h.table)).sort(
        (a, b) => Number(a.id) - Number(b.id),
      );
      expect(archived).toEqual(before.map((r) => ({ ...r, lockedBy: null })));
      expect(archived.map((r) => [r.messageId, r.status, r.attempts])).toEqual([
        [ids[0], 'delivered', 1],
        [ids[1], 'delivered', 1],
        [ids[2], 'delivered', 1],
        [ids[3], 'delivered', 2],
        [ids[4], 'dead', 1],
      ]);
      expect(archived[0]?.headers).toMatchObject({ tenant: 't1' });
      expect(archived[4]?.lastError).toEqual(expect.any(String));
    });

    it('archives a message id again when a dedupe key comes back after its row was cleaned', async () => {
      const publisher = new RecordingPublisher();
      const h = await bootArchiving(publisher, null);
      const again: OutboxMessage = msg('k', { v: 1 }, { dedupeKey: 'order-1:created' });
      const [first] = await h.commit([again]);
      await h.runUntilIdle();
      await ageRows(scope.ds, h.table, 'delivered', 120);
      expect(await h.cleaner.runOnce()).toEqual({ delivered: 1, dead: 0 });

      const [second] = await h.commit([again]);
      expect(second).toBe(first);
      await h.runUntilIdle();
      await ageRows(scope.ds, h.table, 'delivered', 120);
      expect(await h.cleaner.runOnce()).toEqual({ delivered: 1, dead: 0 });

      expect((await readArchive(scope.ds, h.table)).map((r) => r.messageId)).toEqual([
        first,
        first,
      ]);
      expect(publisher.sentIds).toEqual([first, first]);
    });

    it('keeps a binary message’s bytes, content type and broker attributes in the archive', async () => {
      const publisher = new RecordingPublisher();
      const h = await bootArchiving(publisher, null);
      const bytes = Buffer.from([0, 1, 2, 0xff, 0xfe, 0x41]);
      const [id] = await h.commit([
        {
          topic: 'orders',
          key: 'b',
          payload: bytes,
          contentType: 'application/octet-stream',
          attributes: { rabbitmq: { priority: 3 } },
        },
      ]);
      await h.runUntilIdle();
      await ageRows(scope.ds, h.table, 'delivered', 120);
      expect(await h.cleaner.runOnce()).toEqual({ delivered: 1, dead: 0 });
      const hex =
        db.name === 'postgres' ? `encode(payload_bytes, 'hex')` : 'lower(hex(payload_bytes))';
      const q = db.name === 'mariadb' ? `\`${h.table}_archive\`` : `"${h.table}_archive"`;
      const [row] = await scope.ds.query<Record<string, unknown>[]>(
        `SELECT ${hex} AS bytes, payload_encoding, content_type, broker_attributes FROM ${q}`,
      );
      expect(row).toMatchObject({
        bytes: bytes.toString('hex'),
        payload_encoding: 'binary',
        content_type: 'application/octet-stream',
      });
      const attributes = row?.broker_attributes;
      expect(typeof attributes === 'string' ? JSON.parse(attributes) : attributes).toEqual({
        rabbitmq: { priority: 3 },
      });
      expect((await readArchive(scope.ds, h.table)).map((r) => r.messageId)).toEqual([id]);
    });

    // SQLite has one writer at a time: the cleaner's transaction cannot interleave with a retry.
    if (db.name !== 'sqlite') {
      it('leaves a dead letter requeued while the cleaner archives it in the outbox only, and counts what it archived', async () => {
        const publisher = new RecordingPublisher();
        const h = await bootArchiving(publisher, MINUTE);
        const [retried, kept] = (await h.commit([msg('r'), msg('k')])) as [string, string];
        publisher.fail(retried, 'permanent');
        publisher.fail(kept, 'permanent');
        await h.runUntilIdle();
        await ageRows(scope.ds, h.table, 'dead', 120);

        // The retry has requeued its row but not committed when the cleaner comes to that row.
        const retry = await storeHoldingCommit(scope.ds, h.table);
        const requeued = retry.store.requeueDead([retried]);
        await retry.held;
        const cleaned = h.cleaner.runOnce();
        try {
          // MariaDB refreshes innodb_trx only when last read over 100 ms ago: probe slower.
          await waitFor(
            'the cleaner to wait for the requeued row',
            () => waitsForLock(scope.ds, h.table),
            { intervalMs: 200 },
          );
        } finally {
          retry.release();
        }
        expect(await requeued).toEqual({ requeued: 1, resequenced: 0 });
        const report = await cleaned;

        const archived = await readArchive(scope.ds, h.table);
        expect(archived.map((r) => [r.messageId, r.status])).toEqual([[kept, 'dead']]);
        expect(report).toEqual({ delivered: 0, dead: archived.length });
        expect((await h.rows()).map((r) => [r.messageId, r.status])).toEqual([
          [retried, 'pending'],
        ]);
      });
    }

    it('keeps dead letters in the outbox when they have no retention', async () => {
      const publisher = new RecordingPublisher();
      const h = await bootArchiving(publisher, null);
      const [dead] = await h.commit([msg('p')]);
      publisher.fail(dead as string, 'permanent');
      await h.runUntilIdle();
      await ageRows(scope.ds, h.table, 'dead', 3_600);
      expect(await h.cleaner.runOnce()).toEqual({ delivered: 0, dead: 0 });
      expect((await h.rows()).map((r) => [r.messageId, r.status])).toEqual([[dead, 'dead']]);
      expect(await readArchive(scope.ds, h.table)).toEqual([]);
    });

    it('refuses to boot when the archive table is missing, saying how to make it', async () => {
      const table = await scope.table('outbox_ar');
      const failure = Test.createTestingModule({
        imports: [
          OutboxModule.forRoot({
            dataSource: scope.ds,
            tableName: table,
            publisher: new RecordingPublisher(),
            autoStart: false,
            cleaner: { archive: true, deliveredRetentionMs: MINUTE },
          }),
        ],
      })
        .compile()
        .then((m) => m.init());
      const error = await failure.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(OutboxTableMissingError);
      expect((error as Error).message).toContain(
        `npx outbox schema migrate --table ${table} --archive`,
      );
      expect((error as Error).message).toContain(
        `ensureOutboxArchiveTable(dataSource, { tableName: '${table}' })`,
      );
    });

    it('deletes as before when archive is off, and leaves an existing archive alone', async () => {
      const publisher = new RecordingPublisher();
      const h = await boot(publisher, { cleaner: { deliveredRetentionMs: MINUTE } });
      await ensureOutboxArchiveTable(scope.ds, { tableName: h.table });
      await h.commit([msg('a'), msg('b')]);
      await h.runUntilIdle();
      await ageRows(scope.ds, h.table, 'delivered', 120);
      expect(await h.cleaner.runOnce()).toEqual({ delivered: 2, dead: 0 });
      expect(await h.rows()).toEqual([]);
      expect(await readArchive(scope.ds, h.table)).toEqual([]);
    });
  });
}
