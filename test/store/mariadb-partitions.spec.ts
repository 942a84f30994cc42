import { OutboxPartitionMaintainer } from '../../lib';
import { ensureOutboxTable, outboxPartitions, type OutboxPartitionPolicy } from '../../lib/schema';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { hashKey } from '../../lib/store/rows/outbox-row.mapper';
import { partitionSuffix, periodStart } from '../../lib/store/partitions/partition-range';
import { testDatabase, uniqueTable } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import { dispatchTestApp, dropOutboxTable } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { waitFor } from '../support/wait-for';
import { messageIdBytes } from '../../lib/store/rows/message-id-codec';

// The time-partitioned table on MariaDB (RANGE COLUMNS on created_at below a catch-all pmax):
// a key spread over partitions drains in id order, and the maintainer drops exactly the
// partitions whose rows are all final while writers and a dispatcher run, one at a time.

const DAY = 86_400_000;
const db = testDatabase('mariadb');

const dayStart = (days: number): Date =>
  new Date(periodStart('day', new Date()).getTime() - days * DAY);
const datetime = (at: Date): string => at.toISOString().slice(0, 19).replace('T', ' ');

describeWith(['mariadb'], 'partitioned outbox table on mariadb', () => {
  const scope = useOutboxScope(db, { tablePrefix: 'outbox_mp' });
  const boot = (publisher: RecordingPublisher, table: string, options = {}) =>
    scope.open({ ...dispatchTestApp(publisher, options), table });

  /** A fresh table partitioned by day with day partitions back to `back` days ago. */
  async function partitionedTable(back: number): Promise<{ table: string; names: string[] }> {
    const table = uniqueTable('outbox_mp');
    await ensureOutboxTable(scope.ds, {
      tableName: table,
      partitioning: { interval: 'day', premake: 2 },
    });
    scope.defer(() => dropOutboxTable(scope.ds, table));
    // The first partition holds everything below its bound: split it into the past days.
    const days = Array.from({ length: back + 1 }, (_, i) => back - i);
    await scope.ds.query(
      `ALTER TABLE \`${table}\` REORGANIZE PARTITION ${partitionSuffix(dayStart(0))} INTO (${days
        .map(
          (d) =>
            `PARTITION ${partitionSuffix(dayStart(d))} VALUES LESS THAN ('${datetime(dayStart(d - 1))}')`,
        )
        .join(', ')})`,
    );
    return { table, names: days.map((d) => partitionSuffix(dayStart(d))) };
  }

  it('drains a key whose messages span three partitions in id order, the oldest partition holding the newest messages', async () => {
    const { table, names } = await partitionedTable(2);
    const publisher = new RecordingPublisher();
    const app = await boot(publisher, table, { dispatcher: { batchSize: 2 } });
    const ids = await app.enqueue(Array.from({ length: 9 }, (_, i) => msg('k', { n: i })));
    const moveTo = (days: number, list: string[]) =>
      scope.ds.query(
        `UPDATE \`${table}\` SET created_at = created_at - INTERVAL ? DAY WHERE message_id IN (?, ?, ?)`,
        // The table stores the ids' 16 bytes (BINARY(16)).
        [days, ...list.map(messageIdBytes)],
      );
    await moveTo(1, ids.slice(3, 6));
    await moveTo(2, ids.slice(6, 9));
    const counts = await scope.ds.query<{ name: string; n: string | number }[]>(
      `SELECT PARTITION_NAME AS name, TABLE_ROWS AS n FROM information_schema.PARTITIONS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND PARTITION_NAME IN (?, ?, ?)`,
      [table, ...names],
    );
    expect(counts).toHaveLength(3);
    for (const name of names) {
      const [row] = await scope.ds.query<{ n: string | number }[]>(
        `SELECT COUNT(*) AS n FROM \`${table}\` PARTITION (${name})`,
      );
      expect(Number(row?.n)).toBe(3);
    }
    publisher.fail(ids[0] ?? '', 'retryable', { times: 1 });
    await waitFor('every message published', async () => {
      await app.runUntilIdle();
      return publisher.messages.length >= 9;
    });
    expect(publisher.messages.map((m) => m.messageId)).toEqual(ids);
  }, 60_000);

  it('writes an enqueue’s guard rows with the created_at of their outbox rows, so a guard is pruned with its row’s partition', async () => {
    const { table } = await partitionedTable(0);
    const app = await boot(new RecordingPublisher(), table);
    await app.enqueue([
      msg('a', { n: 1 }, { dedupeKey: 'order-1' }),
      msg('a', { n: 2 }, { dedupeKey: 'order-2' }),
      msg('b', { n: 3 }),
    ]);
    await app.enqueue([msg('c', { n: 4 }, { dedupeKey: 'order-3', delayMs: 1_000 })]);
    const rows = await scope.ds.query<{ outbox: string; guard: string }[]>(
      `SELECT DATE_FORMAT(o.created_at, '%Y-%m-%d %H:%i:%s.%f') AS outbox,
  DATE_FORMAT(g.created_at, '%Y-%m-%d %H:%i:%s.%f') AS guard
FROM \`${table}_ids\` AS g JOIN \`${table}\` AS o ON o.message_id = g.message_id ORDER BY o.id`,
    );
    expect(rows).toHaveLength(3);
    for (const row of rows) expect(row.guard).toBe(row.outbox);
  });

  describe('the partition maintainer', () => {
    const policy: OutboxPartitionPolicy = { premake: 2, retentionMs: DAY, deadRetentionMs: null };

    /** Rows with the statuses and times each past partition needs. */
    async function seed(table: string): Promise<void> {
      const row = (days: number, status: string) =>
        scope.ds.query(
          `INSERT INTO \`${table}\` (message_id, topic, message_key, event_type, payload, headers, status, created_at, available_at, delivered_at, dead_at)
VALUES (UNHEX(REPLACE(UUID(), '-', '')), 'orders', ?, 't', '{}', '{}', ?, ? + INTERVAL 1 HOUR, UTC_TIMESTAMP(6) + INTERVAL 1 DAY,
  IF(? = 'delivered', UTC_TIMESTAMP(6) - INTERVAL 3 DAY, NULL), IF(? = 'dead', UTC_TIMESTAMP(6) - INTERVAL 3 DAY, NULL))`,
          [`key-${days}`, status, datetime(dayStart(days)), status, status],
        );
      await row(5, 'delivered');
      await row(5, 'delivered');
      await row(4, 'delivered');
      await row(4, 'pending'); // delayed a day: the dispatcher leaves it
      await row(3, 'dead');
      await row(2, 'waiting');
      await row(1, 'delivered'); // yesterday's range has not been over for a day yet
    }

    it('drops only the partitions whose rows are all final, while writers and a dispatcher run, and says why it keeps the others', async () => {
      const { table, names } = await partitionedTable(5);
      const [p5, p4, p3, p2, p1] = names;
      await seed(table);
      const publisher = new RecordingPublisher();
      const app = await boot(publisher, table, {
        partitioning: { interval: 'day', retention: '1d', premake: 2 },
      });
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
      expect(byName.get(p5 ?? '')).toMatchObject({
        droppable: true,
        rows: { delivered: 2, pending: 0, waiting: 0, dead: 0 },
      });
      expect(byName.get(p4 ?? '')?.keptBecause).toBe('holds pending messages');
      expect(byName.get(p3 ?? '')?.keptBecause).toContain('holds dead letters');
      expect(byName.get(p2 ?? '')?.keptBecause).toBe(
        'holds waiting messages (queued behind their key)',
      );
      expect(byName.get(p1 ?? '')?.keptBecause).toBe('within retention');
      expect(byName.get('pmax')?.keptBecause).toBe('the catch-all partition is never dropped');

      const report = await app.moduleRef.get(OutboxPartitionMaintainer).runOnce();
      writing = false;
      await writer;
      expect(report).toMatchObject({ skipped: null, dropped: [p5] });
      expect(report.kept.map((k) => k.name).sort()).toEqual([p4, p3, p2].sort());
      await waitFor("the writers' messages delivered", () =>
        written.every((id) => publisher.messageIds.includes(id)),
      );
      const left = await scope.ds.query<{ name: string }[]>(
        `SELECT PARTITION_NAME AS name FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`,
        [table],
      );
      expect(left.map((r) => r.name)).not.toContain(p5);
      expect(left.map((r) => r.name)).toContain(p4);
    }, 60_000);

    it('promotes the next message of a key whose dead head went with a dropped partition', async () => {
      const { table, names } = await partitionedTable(3);
      const [p3] = names;
      const insert = (status: string, createdAt: string, deadAt: string | null) =>
        scope.ds.query(
          `INSERT INTO \`${table}\` (message_id, topic, message_key, event_type, payload, headers, status, created_at, dead_at)
VALUES (UNHEX(REPLACE(UUID(), '-', '')), 'orders', 'k', 't', '{}', '{}', ?, ?, ?)`,
          [status, createdAt, deadAt],
        );
      // Key k: its dead head three days back, its follower parked behind it today.
      await insert(
        'dead',
        datetime(new Date(dayStart(3).getTime() + 3_600_000)),
        datetime(dayStart(3)),
      );
      await insert('waiting', datetime(new Date()), null);
      const publisher = new RecordingPublisher();
      const app = await boot(publisher, table, {
        partitioning: { interval: 'day', retention: '1d', premake: 2 },
        cleaner: { deadRetentionMs: DAY },
      });

      const report = await app.moduleRef.get(OutboxPartitionMaintainer).runOnce();
      expect(report.dropped).toContain(p3);
      // No unlocker ran: the maintainer promoted it.
      expect((await app.rows()).map((r) => [r.key, r.status])).toEqual([['k', 'pending']]);
      await app.runUntilIdle();
      expect(publisher.messages.map((m) => m.key)).toEqual(['k']);
    });

    it('adds partitions by reorganising pmax; a dry run changes nothing', async () => {
      const { table } = await partitionedTable(0);
      const partitions = outboxPartitions(typeormSqlPort(scope.ds), { tableName: table });
      const ahead = { ...policy, premake: 4 };
      const wanted = [3, 4].map((d) => partitionSuffix(dayStart(-d)));
      expect(await partitions.maintain(ahead, true)).toEqual({
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
    });

    it('runs one at a time: a run that finds GET_LOCK held skips, and two racing runs drop each partition once', async () => {
      const { table, names } = await partitionedTable(5);
      await seed(table);
      const partitions = outboxPartitions(typeormSqlPort(scope.ds), { tableName: table });
      const holder = scope.ds.createQueryRunner();
      await holder.connect();
      try {
        await holder.query('SELECT GET_LOCK(?, 0)', [
          `nestjs-outbox-partitions:${hashKey(`.${table}`)}`,
        ]);
        const blocked = await partitions.maintain(policy, false);
        expect(blocked.skipped).toContain('another instance is maintaining the partitions');
        expect(blocked.dropped).toEqual([]);
      } finally {
        await holder.query('SELECT RELEASE_ALL_LOCKS()');
        await holder.release();
      }
      const races = await Promise.all([
        partitions.maintain(policy, false),
        outboxPartitions(typeormSqlPort(scope.ds), { tableName: table }).maintain(policy, false),
      ]);
      expect(races.flatMap((r) => r.dropped)).toEqual([names[0]]);
    }, 30_000);

    it('never touches a table it does not recognise', async () => {
      const { table, names } = await partitionedTable(5);
      await seed(table);
      await scope.ds.query(
        `ALTER TABLE \`${table}\` REORGANIZE PARTITION pmax INTO (PARTITION archive VALUES LESS THAN ('2099-01-01 00:00:00'), PARTITION pmax VALUES LESS THAN (MAXVALUE))`,
      );
      const report = await outboxPartitions(typeormSqlPort(scope.ds), {
        tableName: table,
      }).maintain(policy, false);
      expect(report.skipped).toContain('the partition archive');
      expect(report.dropped).toEqual([]);
      const [row] = await scope.ds.query<{ n: string | number }[]>(
        `SELECT COUNT(*) AS n FROM \`${table}\` PARTITION (${names[0]})`,
      );
      expect(Number(row?.n)).toBe(2);
    });
  });

  it('the manual conversion steps turn a plain table with rows into a partitioned one the module accepts', async () => {
    const plain = await scope.table('outbox_mq');
    const enqueuer = await scope.open({ table: plain });
    const kept = await enqueuer.enqueue([msg('k', { n: 1 }), msg('k', { n: 2 })]);
    await enqueuer.close();
    let steps: string[] = [];
    try {
      await ensureOutboxTable(scope.ds, { tableName: plain, partitioning: { interval: 'day' } });
    } catch (error) {
      const [, listed = ''] = (error as Error).message.split(/\n(.*)/s);
      steps = listed
        .split(/;\n/)
        .map((step) => step.replace(/;$/, ''))
        .filter((step) => !step.startsWith('--'));
    }
    expect(steps[0]).toBe(`RENAME TABLE \`${plain}\` TO \`${plain}_plain\``);
    scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS \`${plain}_plain\``));
    for (const step of steps) await scope.ds.query(step);
    // The last step of the listing: migrate finishes the converted table.
    await ensureOutboxTable(scope.ds, { tableName: plain, partitioning: { interval: 'day' } });
    const publisher = new RecordingPublisher();
    const app = await boot(publisher, plain);
    const added = await app.enqueue([msg('k', { n: 3 })]);
    await app.runUntilIdle();
    expect(publisher.messageIds).toEqual([...kept, ...added]);
    // New ids continue after the copied ones.
    const rows = await app.rows();
    expect(Number(rows.at(-1)?.id)).toBeGreaterThan(Number(rows.at(0)?.id));
  }, 30_000);
});
