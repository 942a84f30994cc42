import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { OutboxOptionsError, OutboxPartitionMaintainer } from '../../lib';
import {
  OutboxTableLayoutError,
  ensureOutboxTable,
  outboxMigrations,
  outboxPartitions,
  type OutboxPartitionPolicy,
} from '../../lib/schema';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import { tableNamesFor } from '../../lib/store/schema/outbox-table-ddl';
import {
  postgresClaim,
  postgresOpening,
  postgresSettle,
} from '../../lib/store/postgres/postgres.sql';
import { hashKey } from '../../lib/store/rows/outbox-row.mapper';
import { partitionSuffix, periodStart } from '../../lib/store/partitions/partition-range';
import { testDatabase, uniqueTable } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import { dispatchTestApp, dropOutboxTable } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { waitFor } from '../support/wait-for';
import { OUTBOX_SCHEMA_STEPS, OUTBOX_STEP_OPTIONS } from '../../lib/store/schema/schema-steps';
import { CLAIM_LOOP } from '../support/test-claims';

// The time-partitioned table on PostgreSQL: a key's messages spread over partitions drain in id
// order, and the partition maintainer drops exactly the partitions whose rows are all final,
// while writers and a dispatcher run, one maintainer at a time.

const DAY = 86_400_000;

/** Thrown to roll back a transaction whose statements were only looked at. */
class Rollback extends Error {}
const db = testDatabase('postgres');
const policyOf = (premake: number): OutboxPartitionPolicy => ({
  premake,
  retentionMs: DAY,
  deadRetentionMs: null,
});

/** Midnight UTC `days` days before today's. */
const dayStart = (days: number): Date =>
  new Date(periodStart('day', new Date()).getTime() - days * DAY);

describeWith(['postgres'], 'partitioned outbox table on postgres', () => {
  const scope = useOutboxScope(db, { tablePrefix: 'outbox_pp', options: CLAIM_LOOP });
  const apps = {
    boot: (publisher: RecordingPublisher, table: string, options = {}) =>
      scope.open({ ...dispatchTestApp(publisher, options), table }),
  };

  /** A fresh table partitioned by day (with schema step 9 when asked), dropped after the test. */
  async function partitionedTable(withDeliveryPartitions = false): Promise<string> {
    const table = uniqueTable('outbox_pp');
    await ensureOutboxTable(scope.ds, {
      tableName: table,
      partitioning: { interval: 'day', premake: 2 },
      ...(withDeliveryPartitions ? { with: ['partitions' as const] } : {}),
    });
    scope.defer(() => dropOutboxTable(scope.ds, table));
    return table;
  }

  /** Creates the day partition starting `days` ago, as the maintainer would have. */
  async function pastPartition(table: string, days: number): Promise<string> {
    const from = dayStart(days);
    const name = `${table}_${partitionSuffix(from)}`;
    await scope.ds.query(
      `CREATE TABLE "${name}" PARTITION OF "${table}" FOR VALUES FROM ('${from.toISOString()}') TO ('${new Date(from.getTime() + DAY).toISOString()}')`,
    );
    return name;
  }

  /** The partition each message's row is in, by message id. */
  async function partitionsOf(table: string): Promise<Map<string, string>> {
    const rows = await scope.ds.query<{ id: string; part: string }[]>(
      `SELECT message_id::text AS id, tableoid::regclass::text AS part FROM "${table}"`,
    );
    return new Map(rows.map((r) => [r.id, r.part.replace(/"/g, '')]));
  }

  /** A key's messages spread over three day partitions, the oldest holding the newest. */
  async function drainAcrossPartitions(
    table: string,
    claims: 'leases' | 'partitions',
  ): Promise<void> {
    const [older, oldest] = [await pastPartition(table, 1), await pastPartition(table, 2)];
    const publisher = new RecordingPublisher();
    const app = await apps.boot(publisher, table, { dispatcher: { batchSize: 2, claims } });
    const ids = await app.enqueue(Array.from({ length: 9 }, (_, i) => msg('k', { n: i })));
    const others = await app.enqueue([msg('other', { n: 0 }), msg(null, { n: 1 })]);
    // Later ids in earlier partitions: an order by partition, or by created_at, would be wrong.
    const moveTo = (days: number, list: string[]) =>
      scope.ds.query(
        `UPDATE "${table}" SET created_at = created_at - $1 * interval '1 day' WHERE message_id = ANY($2::uuid[])`,
        [days, list],
      );
    await moveTo(1, ids.slice(3, 6));
    await moveTo(2, ids.slice(6, 9));
    const where = await partitionsOf(table);
    const today = `${table}_${partitionSuffix(dayStart(0))}`;
    expect(ids.map((id) => where.get(id))).toEqual([
      ...Array<string>(3).fill(today),
      ...Array<string>(3).fill(older),
      ...Array<string>(3).fill(oldest),
    ]);
    // The first of the key fails once: the rest wait behind it across the partitions.
    publisher.fail(ids[0] ?? '', 'retryable', { times: 1 });
    await waitFor('every message published', async () => {
      await app.runUntilIdle();
      return publisher.messages.length >= 11;
    });
    const keyOrder = publisher.messages.filter((m) => m.key === 'k').map((m) => m.messageId);
    expect(keyOrder).toEqual(ids);
    expect(new Set(publisher.messageIds)).toEqual(new Set([...ids, ...others]));
    const rows = await app.rows();
    expect(rows.every((r) => r.status === 'delivered')).toBe(true);
    // Partition owners read without leasing: no row names a dispatcher.
    if (claims === 'partitions') expect(rows.filter((r) => r.lockedBy !== null)).toEqual([]);
  }

  it('drains a key whose messages span three partitions in id order, the oldest partition holding the newest messages', async () => {
    await drainAcrossPartitions(await partitionedTable(), 'leases');
  }, 60_000);

  it('with schema step 9 too, delivery partitions drain a key spanning three partitions in id order, leasing no row', async () => {
    await drainAcrossPartitions(await partitionedTable(true), 'partitions');
  }, 60_000);

  it('the head-of-key check reads the key index of every partition (merged, no sequential scan)', async () => {
    const table = await partitionedTable();
    await pastPartition(table, 1);
    const plan = await scope.ds.transaction<{ 'QUERY PLAN': string }[]>(async (m) => {
      await m.query(
        `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)`,
      );
      return m.query(
        `EXPLAIN SELECT e.id FROM "${table}" AS e WHERE e.message_key >= 'k' AND e.message_key <= 'k' AND e.status IN ('pending', 'waiting', 'dead') ORDER BY e.message_key, e.id LIMIT 1`,
      );
    });
    const text = plan.map((r) => r['QUERY PLAN']).join('\n');
    expect(text).toContain('Merge Append');
    expect(text).not.toMatch(/Seq Scan|Sort\b(?! Key)/);
    // today, tomorrow, the day after, yesterday and the catch-all.
    expect(text.match(/Index Scan using \S+_message_key_id_idx/g)).toHaveLength(5);
  });

  it("a claim and its settle read only the partitions holding the batch's rows, not every partition's primary key", async () => {
    const table = await partitionedTable();
    await pastPartition(table, 1);
    await pastPartition(table, 2);
    const publisher = new RecordingPublisher();
    const app = await apps.boot(publisher, table);
    await app.enqueue(Array.from({ length: 5 }, (_, i) => msg(`k${i}`, { i })));
    const names = tableNamesFor('postgres', { tableName: table });
    const policy = { ordered: true, deadBlocksKey: true, maxRun: 50, batchSize: 200 };
    const executedKeyScans = (plan: { 'QUERY PLAN': string }[]): number =>
      plan.filter(
        (r) =>
          /Index Scan using \S+_pkey/.test(r['QUERY PLAN']) &&
          !r['QUERY PLAN'].includes('never executed'),
      ).length;
    await scope.ds
      .transaction(async (m) => {
        for (const statement of postgresOpening(5_000, 1, [])) await m.query(statement);
        const token = randomUUID();
        const claim = await m.query<{ 'QUERY PLAN': string }[]>(
          `EXPLAIN (ANALYZE, TIMING OFF) ${postgresClaim(names, policy, true)}`,
          ['me', token, 30_000, 10, 70, 50],
        );
        // Six partitions: the lease is written by primary-key probes of today's partition only (on
        // so small a table the heads are found by a scan of the pending indexes instead).
        expect(executedKeyScans(claim)).toBe(1);
        const rows = await m.query<{ id: string; created_at: Date }[]>(
          `SELECT id::text AS id, created_at FROM "${table}" WHERE lock_token = $1`,
          [token],
        );
        expect(rows).toHaveLength(5);
        const settle = await m.query<{ 'QUERY PLAN': string }[]>(
          `EXPLAIN (ANALYZE, TIMING OFF) ${postgresSettle(names, { delivered: true, retry: false, dead: false, release: false }, false, true, true)}`,
          [
            token,
            new Date(Math.min(...rows.map((r) => r.created_at.getTime())) - 1),
            new Date(Math.max(...rows.map((r) => r.created_at.getTime())) + 1),
            rows.map((r) => r.id),
          ],
        );
        expect(executedKeyScans(settle)).toBe(1);
        const [done] = await m.query<{ n: number }[]>(
          `SELECT count(*)::int AS n FROM "${table}" WHERE status = 'delivered'`,
        );
        expect(done?.n).toBe(5);
        throw new Rollback();
      })
      .catch((error: unknown) => {
        if (!(error instanceof Rollback)) throw error;
      });
  });

  it("the plain table's claim, run on a partitioned table, leases only the rows it locked: a ctid names a row in each partition", async () => {
    // The store reads the layout at bootstrap, but takes the options' word when it cannot
    // connect then; the plain claim writes its lease to the rows it locked by their ctid, which
    // partitions repeat (until 2026-11-25 the lease went to one row of each partition).
    const table = await partitionedTable();
    await pastPartition(table, 1);
    const publisher = new RecordingPublisher();
    const app = await apps.boot(publisher, table);
    const ids = await app.enqueue(Array.from({ length: 4 }, (_, i) => msg(`k${i}`, { i })));
    await scope.ds.query(
      `UPDATE "${table}" SET created_at = created_at - interval '1 day' WHERE message_id = ANY($1::uuid[])`,
      [ids.slice(2)],
    );
    const places = await scope.ds.query<{ id: string; at: string }[]>(
      `SELECT message_id::text AS id, ctid::text AS at FROM "${table}"`,
    );
    const at = new Map(places.map((p) => [p.id, p.at]));
    // The first message of today's partition and the first moved to yesterday's share a ctid.
    expect(at.get(ids[0] ?? '')).toBe(at.get(ids[2] ?? ''));
    const names = tableNamesFor('postgres', { tableName: table });
    const policy = { ordered: true, deadBlocksKey: true, maxRun: 50, batchSize: 200 };
    for (const ordered of [true, false]) {
      await scope.ds
        .transaction(async (m) => {
          for (const statement of postgresOpening(5_000, 1, [])) await m.query(statement);
          const token = randomUUID();
          const claimed = await m.query<{ message_id: string }[]>(
            postgresClaim(names, { ...policy, ordered }, false),
            ['me', token, 30_000, 1, 10, ...(ordered ? [50] : [])],
          );
          expect(claimed.map((r) => r.message_id)).toEqual([ids[0]]);
          const leased = await m.query<{ id: string }[]>(
            `SELECT message_id::text AS id FROM "${table}" WHERE lock_token = $1`,
            [token],
          );
          expect(leased.map((r) => r.id)).toEqual([ids[0]]);
          throw new Rollback();
        })
        .catch((error: unknown) => {
          if (!(error instanceof Rollback)) throw error;
        });
    }
  });

  it('without ordering, the claim on a partitioned table leases the due rows of every partition in due order, each once', async () => {
    const table = await partitionedTable();
    await pastPartition(table, 1);
    const publisher = new RecordingPublisher();
    const app = await apps.boot(publisher, table);
    const ids = await app.enqueue(Array.from({ length: 4 }, (_, i) => msg('k', { i })));
    // Two of them in yesterday's partition; due times in the order 3, 1, 2, 0.
    await scope.ds.query(
      `UPDATE "${table}" SET created_at = created_at - interval '1 day' WHERE message_id = ANY($1::uuid[])`,
      [ids.slice(0, 2)],
    );
    await scope.ds.query(
      `UPDATE "${table}" AS o SET available_at = now() - (5 - d.rank) * interval '1 second'
FROM unnest($1::uuid[]) WITH ORDINALITY AS d(id, rank) WHERE o.message_id = d.id`,
      [[ids[3], ids[1], ids[2], ids[0]]],
    );
    expect(new Set((await partitionsOf(table)).values()).size).toBe(2);
    const names = tableNamesFor('postgres', { tableName: table });
    const policy = { ordered: false, deadBlocksKey: true, maxRun: 1, batchSize: 200 };
    await scope.ds
      .transaction(async (m) => {
        for (const statement of postgresOpening(5_000, 1, [])) await m.query(statement);
        const token = randomUUID();
        const claimed = await m.query<{ message_id: string }[]>(
          postgresClaim(names, policy, true),
          ['me', token, 30_000, 3, 10],
        );
        expect(claimed.map((r) => r.message_id)).toEqual([ids[3], ids[1], ids[2]]);
        const leased = await m.query<{ id: string; attempts: number }[]>(
          `SELECT message_id::text AS id, attempts FROM "${table}" WHERE lock_token = $1 ORDER BY available_at`,
          [token],
        );
        expect(leased).toEqual([ids[3], ids[1], ids[2]].map((id) => ({ id, attempts: 1 })));
        throw new Rollback();
      })
      .catch((error: unknown) => {
        if (!(error instanceof Rollback)) throw error;
      });
  });

  it('the cleaner leaves delivered rows to the maintainer and still deletes dead rows past their retention', async () => {
    const table = await partitionedTable();
    const publisher = new RecordingPublisher();
    const h = await apps.boot(publisher, table, {
      cleaner: { deliveredRetentionMs: 1_000, deadRetentionMs: 60_000 },
    });
    const ids = await h.commit([msg('a'), msg('b'), msg('poison')]);
    publisher.fail(ids[2] ?? '', 'permanent');
    await h.runUntilIdle();
    await scope.ds.query(
      `UPDATE "${table}" SET delivered_at = now() - interval '1 hour', dead_at = now() - interval '1 hour'`,
    );
    expect(await h.cleaner.runOnce()).toEqual({ delivered: 0, dead: 1 });
    expect((await h.rows()).map((r) => r.status)).toEqual(['delivered', 'delivered']);
  });

  describe('the partition maintainer', () => {
    const policy: OutboxPartitionPolicy = { premake: 2, retentionMs: DAY, deadRetentionMs: null };

    /**
     * A table with past partitions, one per case the maintainer must tell apart (rows written
     * directly, with the statuses and times each case needs).
     */
    async function seeded(table: string) {
      const names = {
        delivered: await pastPartition(table, 6),
        pending: await pastPartition(table, 5),
        dead: await pastPartition(table, 4),
        waiting: await pastPartition(table, 3),
        recent: await pastPartition(table, 2),
        retained: await pastPartition(table, 1),
      };
      const row = (days: number, status: string, extra = '') =>
        scope.ds.query(
          `INSERT INTO "${table}" (message_id, topic, message_key, event_type, payload, status, created_at, available_at, delivered_at, dead_at)
SELECT gen_random_uuid(), 'orders', $1, 't', '{}', $2::text, $3::timestamptz + interval '1 hour',
  now() + interval '1 day', CASE WHEN $2::text = 'delivered' THEN now() - interval '3 days' END,
  CASE WHEN $2::text = 'dead' THEN now() - interval '3 days' END ${extra}`,
          [`key-${days}`, status, dayStart(days).toISOString()],
        );
      await row(6, 'delivered');
      await row(6, 'delivered');
      await row(5, 'delivered');
      await row(5, 'pending'); // delayed a day: the dispatcher leaves it
      await row(4, 'delivered');
      await row(4, 'dead');
      await row(3, 'waiting');
      await row(2, 'delivered');
      await scope.ds.query(
        `UPDATE "${table}" SET delivered_at = now() - interval '1 hour' WHERE message_key = 'key-2'`,
      );
      await row(1, 'delivered'); // yesterday's range has not been over for a day yet
      return names;
    }

    it('drops only the partitions whose rows are all final, while writers and a dispatcher run, and says why it keeps the others', async () => {
      const table = await partitionedTable();
      const names = await seeded(table);
      const publisher = new RecordingPublisher();
      const app = await apps.boot(publisher, table, {
        partitioning: { interval: 'day', retention: '1d', premake: 2 },
      });
      // Writers and the dispatcher keep going while the maintainer runs.
      let writing = true;
      const written: string[] = [];
      const writer = (async () => {
        for (let i = 0; writing; i++)
          written.push(...(await app.enqueue([msg(`w${i % 5}`, { i })])));
      })();
      await app.dispatcher.start();
      await waitFor('writes under way', () => written.length >= 5);
      const status = await outboxPartitions(typeormSqlPort(scope.ds), { tableName: table }).status(
        policy,
        true,
      );
      const byName = new Map(status.partitions.map((p) => [p.name, p]));
      expect(byName.get(names.delivered)).toMatchObject({
        droppable: true,
        keptBecause: null,
        rows: { delivered: 2, pending: 0, waiting: 0, dead: 0 },
      });
      expect(byName.get(names.pending)?.keptBecause).toBe('holds pending messages');
      expect(byName.get(names.dead)?.keptBecause).toContain(
        'holds dead letters, kept until an operator retries or purges them',
      );
      expect(byName.get(names.waiting)?.keptBecause).toBe(
        'holds waiting messages (queued behind their key)',
      );
      expect(byName.get(names.recent)?.keptBecause).toBe(
        'holds messages delivered within the retention',
      );
      expect(byName.get(names.retained)?.keptBecause).toBe('within retention');
      expect(byName.get(`${table}_pdefault`)?.keptBecause).toBe(
        'the catch-all partition is never dropped',
      );

      const report = await app.moduleRef.get(OutboxPartitionMaintainer).runOnce();
      writing = false;
      await writer;
      expect(report.skipped).toBeNull();
      expect(report.dropped).toEqual([names.delivered]);
      expect(report.kept.map((k) => k.name).sort()).toEqual(
        [names.pending, names.dead, names.waiting, names.recent].sort(),
      );
      const after = await scope.ds.query<{ name: string }[]>(
        `SELECT c.relname AS name FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass`,
        [`"${table}"`],
      );
      expect(after.map((r) => r.name)).not.toContain(names.delivered);
      expect(after.map((r) => r.name)).toContain(names.pending);
      // Every message the writers committed is delivered; nothing of theirs was lost.
      await waitFor("the writers' messages delivered", () =>
        written.every((id) => publisher.messageIds.includes(id)),
      );
      // A dead letter past its own retention no longer keeps its partition.
      const dead = await outboxPartitions(typeormSqlPort(scope.ds), { tableName: table }).maintain(
        { ...policy, deadRetentionMs: DAY },
        false,
      );
      expect(dead.dropped).toEqual([names.dead]);
    }, 60_000);

    it('creates the partitions ahead, and a dry run changes nothing', async () => {
      const table = await partitionedTable();
      const partitions = outboxPartitions(typeormSqlPort(scope.ds), { tableName: table });
      const ahead = { ...policy, premake: 5 };
      const dry = await partitions.maintain(ahead, true);
      const wanted = [3, 4, 5].map(
        (d) => `${table}_${partitionSuffix(new Date(dayStart(0).getTime() + d * DAY))}`,
      );
      expect(dry).toEqual({
        dryRun: true,
        skipped: null,
        created: wanted,
        dropped: [],
        kept: [],
        notCreated: [],
      });
      expect((await partitions.status(ahead, false)).missing).toEqual(wanted);
      expect(await partitions.maintain(ahead, false)).toMatchObject({ created: wanted });
      expect((await partitions.status(ahead, false)).missing).toEqual([]);
      // A range whose rows already sit in the catch-all (the maintainer fell behind): reported,
      // not created, and the rest of the run goes on.
      const late = new Date(dayStart(0).getTime() + 7 * DAY);
      await scope.ds.query(
        `INSERT INTO "${table}" (message_id, topic, event_type, payload, created_at) VALUES (gen_random_uuid(), 'orders', 't', '{}', $1)`,
        [new Date(late.getTime() + 3_600_000).toISOString()],
      );
      const further = await partitions.maintain({ ...policy, premake: 8 }, false);
      expect(further.created).toEqual([
        `${table}_${partitionSuffix(new Date(dayStart(0).getTime() + 6 * DAY))}`,
        `${table}_${partitionSuffix(new Date(dayStart(0).getTime() + 8 * DAY))}`,
      ]);
      expect(further.notCreated).toEqual([
        {
          name: `${table}_${partitionSuffix(late)}`,
          reason: `${table}_pdefault holds rows of its range (the maintainer fell behind): move them by hand (docs/partitioning.md)`,
        },
      ]);
    });

    it('runs once at bootstrap: an app back after a long stop gets its partitions ahead without waiting an interval', async () => {
      const table = await partitionedTable(); // made with premake 2
      const partitions = outboxPartitions(typeormSqlPort(scope.ds), { tableName: table });
      const ahead = { ...policy, premake: 5 };
      expect((await partitions.status(ahead, false)).missing).toHaveLength(3);
      await apps.boot(new RecordingPublisher(), table, {
        autoStart: true,
        partitioning: { interval: 'day', premake: 5, maintainIntervalMs: 3_600_000 },
      });
      await waitFor(
        'the partitions ahead',
        async () => (await partitions.status(ahead, false)).missing.length === 0,
      );
    });
    it('runs one at a time: a run that finds the lock held skips, and two racing runs drop each partition once', async () => {
      const table = await partitionedTable();
      const names = await seeded(table);
      const partitions = outboxPartitions(typeormSqlPort(scope.ds), { tableName: table });
      // Another instance holding the maintainer's lock.
      const runner = scope.ds.createQueryRunner();
      await runner.connect();
      await runner.startTransaction();
      await runner.query(`SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, [
        hashKey('nestjs-outbox-partitions'),
        hashKey(`.${table}`),
      ]);
      const blocked = await partitions.maintain(policy, false);
      await runner.rollbackTransaction();
      await runner.release();
      expect(blocked.skipped).toContain('another instance is maintaining the partitions');
      expect(blocked.dropped).toEqual([]);
      const races = await Promise.all([
        partitions.maintain(policy, false),
        outboxPartitions(typeormSqlPort(scope.ds), { tableName: table }).maintain(policy, false),
      ]);
      expect(races.flatMap((r) => r.dropped)).toEqual([names.delivered]);
      expect(races.flatMap((r) => r.created)).toEqual([
        ...new Set(races.flatMap((r) => r.created)),
      ]);
    }, 30_000);

    it('never touches a table it does not recognise', async () => {
      const table = await partitionedTable();
      const names = await seeded(table);
      // A partition the outbox does not make (another name, another range).
      await scope.ds.query(
        `CREATE TABLE "${table}_archive" PARTITION OF "${table}" FOR VALUES FROM ('2020-01-01') TO ('2020-02-01')`,
      );
      const partitions = outboxPartitions(typeormSqlPort(scope.ds), { tableName: table });
      const report = await partitions.maintain(policy, false);
      expect(report.skipped).toContain(`the partition ${table}_archive`);
      expect(report.dropped).toEqual([]);
      const left = await scope.ds.query<{ t: string | null }[]>(`SELECT to_regclass($1) AS t`, [
        `"${names.delivered}"`,
      ]);
      expect(left[0]?.t).not.toBeNull();
      // A plain table: nothing to maintain, and it says so.
      const plain = await scope.table('outbox_pq');
      const onPlain = await outboxPartitions(typeormSqlPort(scope.ds), {
        tableName: plain,
      }).maintain(policy, false);
      expect(onPlain.skipped).toContain('is not partitioned');
    });
  });

  describe('bootstrap', () => {
    it('refuses the option on a plain table, and a partitioned table without it, saying what fixes it', async () => {
      const plain = await scope.table('outbox_pq');
      const onPlain = scope.open({ table: plain, options: { partitioning: { interval: 'day' } } });
      await expect(onPlain).rejects.toThrow(OutboxTableLayoutError);
      await expect(onPlain).rejects.toThrow(
        /is a plain \(unpartitioned\) table, but the options ask for a table partitioned by day: convert it/,
      );
      const table = await partitionedTable();
      // What the module does at bootstrap without the option (the harness would add it).
      const noOption = createOutboxStore(
        typeormSqlPort(scope.ds),
        { tableName: table, schema: null, partitioning: null },
        { enabled: false, notify: false },
      );
      await expect(noOption).rejects.toThrow(
        "is partitioned by day, but the options ask for a plain table: set the module's partitioning option to { interval: 'day' }",
      );
      const week = scope.open({ table, options: { partitioning: { interval: 'week' } } });
      await expect(week).rejects.toThrow("set partitioning.interval to 'day' as the table is made");
    });

    it('outboxMigrations({ partitioning }) makes the partitioned table, and refuses a plain one', async () => {
      const table = uniqueTable('outbox_pm');
      const migrationsTable = `${table}_migrations`;
      const ds = new DataSource({
        ...scope.ds.options,
        entities: [],
        synchronize: false,
        migrations: outboxMigrations({
          tableName: table,
          partitioning: { interval: 'week' },
          with: OUTBOX_STEP_OPTIONS,
        }),
        migrationsTableName: migrationsTable,
      });
      await ds.initialize();
      scope.defer(async () => {
        await ds.query(`DROP TABLE IF EXISTS "${migrationsTable}"`);
        await dropOutboxTable(scope.ds, table);
        await ds.destroy();
      });
      expect(await ds.runMigrations()).toHaveLength(OUTBOX_SCHEMA_STEPS.length);
      const { layout } = await outboxPartitions(typeormSqlPort(scope.ds), {
        tableName: table,
      }).status(policyOf(1), false);
      expect(layout).toEqual({ kind: 'partitioned', interval: 'week' });
      // Step 5's index of waiting messages, on the partitioned table as on a plain one.
      expect(
        await scope.ds.query(
          `SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname = $1`,
          [`${table}_waiting_idx`],
        ),
      ).toEqual([{ indexname: `${table}_waiting_idx` }]);
      const publisher = new RecordingPublisher();
      const app = await apps.boot(publisher, table);
      const [id] = await app.enqueue([msg('k', { n: 1 }, { dedupeKey: 'once' })]);
      expect(await app.enqueue([msg('k', { n: 1 }, { dedupeKey: 'once' })])).toEqual([id]);
      await app.runUntilIdle();
      expect(publisher.messageIds).toEqual([id]);

      const plain = await scope.table('outbox_pq');
      const onPlain = new DataSource({
        ...scope.ds.options,
        entities: [],
        synchronize: false,
        migrations: outboxMigrations({ tableName: plain, partitioning: { interval: 'day' } }),
        migrationsTableName: `${plain}_migrations`,
      });
      await onPlain.initialize();
      scope.defer(async () => {
        await onPlain.query(`DROP TABLE IF EXISTS "${plain}_migrations"`);
        await onPlain.destroy();
      });
      await expect(onPlain.runMigrations()).rejects.toThrow(
        'does not convert it to a table partitioned by day by itself',
      );
    }, 30_000);

    it('refuses to convert a plain table, listing the manual steps', async () => {
      const plain = await scope.table('outbox_pq');
      const convert = ensureOutboxTable(scope.ds, {
        tableName: plain,
        partitioning: { interval: 'day' },
      });
      await expect(convert).rejects.toThrow(OutboxTableLayoutError);
      await expect(convert).rejects.toThrow(`ALTER TABLE "${plain}" RENAME TO "${plain}_plain";`);
    });

    it('the manual conversion steps turn a plain table with rows into a partitioned one the module accepts', async () => {
      const plain = await scope.table('outbox_pq');
      const enqueuer = await scope.open({ table: plain });
      const kept = await enqueuer.enqueue([msg('k', { n: 1 }), msg('k', { n: 2 })]);
      await enqueuer.close();
      let steps: string[] = [];
      try {
        await ensureOutboxTable(scope.ds, { tableName: plain, partitioning: { interval: 'day' } });
      } catch (error) {
        // The statements follow the first line, each ending with ';' at the end of a line.
        const [, listed = ''] = (error as Error).message.split(/\n(.*)/s);
        steps = listed
          .split(/;\n/)
          .map((step) => step.replace(/;$/, ''))
          .filter((step) => !step.startsWith('--'));
      }
      expect(steps.length).toBeGreaterThan(5);
      const runner = scope.ds.createQueryRunner();
      try {
        for (const step of steps) await runner.query(step);
      } catch (error) {
        await runner.query('ROLLBACK');
        throw error;
      } finally {
        await runner.release();
      }
      scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS "${plain}_plain"`));
      const publisher = new RecordingPublisher();
      const app = await apps.boot(publisher, plain);
      const added = await app.enqueue([msg('k', { n: 3 })]);
      await app.runUntilIdle();
      expect(publisher.messageIds).toEqual([...kept, ...added]);
    }, 30_000);
  });
});

describe('partitioning on SQLite', () => {
  it('fails at bootstrap with a typed error: SQLite keeps its plain table', async () => {
    const sqlite = testDatabase('sqlite');
    const table = uniqueTable('outbox_ps');
    const ds: DataSource = await sqlite.open(table);
    try {
      const make = ensureOutboxTable(ds, { tableName: table, partitioning: { interval: 'day' } });
      await expect(make).rejects.toThrow(OutboxOptionsError);
      await expect(make).rejects.toThrow(
        'only PostgreSQL and MySQL/MariaDB have partitioned tables',
      );
    } finally {
      await sqlite.close(ds, table);
    }
  });
});
