import { randomUUID } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
import { OutboxAdmin } from '../../lib';
import { type SqlPort } from '../../lib/testing';
import {
  OutboxMessageIdLayoutError,
  createOutboxBinaryIdsMigration,
  migrateOutboxToBinaryIds,
} from '../../lib/schema';
import { typeormSqlPort, typeormSqlRunner } from '../../lib/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import {
  createOutboxArchiveTable,
  outboxTableDropDdl,
} from '../../lib/store/schema/outbox-table-ddl';
import type {
  NewOutboxRow,
  OutboxStore,
  Settlement,
} from '../../lib/store/ports/outbox-store.port';
import { outboxSchemaStatus } from '../../lib/store/schema/schema-status';
import { messageIdText } from '../../lib/store/rows/message-id-codec';
import { readAttempts, readStatuses, testDatabase, uniqueTable } from '../support/databases';
import { createChar36Tables, idColumnTypes } from '../support/mysql-char36-tables';
import { describeWith } from '../support/services';

// The conversion of a table made before binary ids (CHAR(36)) to BINARY(16), in place: every
// row of every status, its attempt history and archive keep their ids, and the queue carries on
// where it was (claims, settles, requeues, admin lookups) on the converted table.

const db = testDatabase('mariadb');
const NONE: Settlement = { delivered: [], retry: [], dead: [], release: [], advancedKeys: [] };

describeWith(['mariadb'], 'MariaDB: CHAR(36) message ids converted to BINARY(16)', () => {
  let ds: DataSource;
  let sql: SqlPort;
  let own: string;
  let table: string;

  beforeEach(async () => {
    own = uniqueTable('outbox_bid_own');
    ds = await db.open(own);
    sql = typeormSqlPort(ds);
    table = uniqueTable('outbox_bid');
  });
  afterEach(async () => {
    for (const s of [...outboxTableDropDdl('mysql', { tableName: table })]) await ds.query(s);
    await ds.query(`DROP TABLE IF EXISTS \`${table}_archive\``);
    await db.close(ds, own);
  });

  const storeOn = (): Promise<OutboxStore> =>
    createOutboxStore(
      sql,
      {
        tableName: table,
        schema: null,
        // Runs of one: the queue is driven head by head (one record per key per claim).
        ordering: { enabled: true, onDeadLetter: 'block', maxRun: 1 },
        partitioning: null,
      },
      { enabled: true, notify: false },
    );
  const row = (key: string | null, messageId = randomUUID()): NewOutboxRow => ({
    messageId,
    topic: 'orders',
    key,
    type: 'T',
    payload: JSON.stringify({ key }),
    headers: '{}',
    availableAt: null,
    delayMs: null,
  });
  const enqueue = (store: OutboxStore, rows: NewOutboxRow[]): Promise<readonly string[]> =>
    ds.transaction((m) => store.insert(typeormSqlRunner(m.queryRunner as QueryRunner), rows, true));
  const claimAll = async (store: OutboxStore) => {
    const batch = await store.claim({ limit: 50, owner: 'test', leaseMs: 60_000 });
    const byKey = new Map(batch.records.map((r) => [r.key, r]));
    return { batch, byKey };
  };
  const archivedIds = async (): Promise<string[]> => {
    const { rows } = await sql.query<{ message_id: unknown }>(
      `SELECT message_id FROM \`${table}_archive\` ORDER BY archive_id`,
    );
    return rows.map((r) => messageIdText(r.message_id));
  };

  it('keeps every row, its history and archive, and the queue carries on', async () => {
    await createChar36Tables(sql, table);
    await createOutboxArchiveTable(sql, { tableName: table });
    const store = await storeOn();
    const ids = {
      delivered: randomUUID(),
      archived: randomUUID(),
      dead: randomUUID(),
      retrying: randomUUID(),
      waiting: randomUUID(),
      pending: randomUUID(),
    };
    await enqueue(store, [row('arch', ids.archived)]);
    let { batch, byKey } = await claimAll(store);
    await store.settle(
      batch.token,
      { ...NONE, delivered: [byKey.get('arch')?.id as string] },
      false,
    );
    expect(await store.purge('delivered', 0, 10, true)).toBe(1);
    await enqueue(store, [row('a', ids.delivered), row('d', ids.dead), row('r', ids.retrying)]);
    await enqueue(store, [row('d', ids.waiting)]);
    await enqueue(store, [{ ...row(null, ids.pending), idempotent: true }]);
    ({ batch, byKey } = await claimAll(store));
    const idOf = (key: string | null): string => byKey.get(key)?.id as string;
    await store.settle(
      batch.token,
      {
        ...NONE,
        delivered: [idOf('a')],
        retry: [
          { id: idOf('d'), delayMs: 0, error: 'first failure', errorClass: 'Error' },
          { id: idOf('r'), delayMs: 3_600_000, error: 'later', errorClass: 'Error' },
        ],
        release: [{ id: idOf(null), delayMs: 0, error: null, errorClass: null }],
        advancedKeys: ['a'],
      },
      false,
    );
    ({ batch, byKey } = await claimAll(store));
    expect(byKey.get('d')?.messageId).toBe(ids.dead);
    await store.settle(
      batch.token,
      {
        ...NONE,
        dead: [{ id: idOf('d'), error: 'gave up', errorClass: 'PermanentPublishError' }],
        release: [{ id: idOf(null), delayMs: 0, error: null, errorClass: null }],
      },
      false,
    );
    await store.park(['d']);

    const statuses = await readStatuses(ds, `\`${table}\``);
    expect(Object.fromEntries(statuses)).toEqual({
      [ids.delivered]: 'delivered',
      [ids.dead]: 'dead',
      [ids.retrying]: 'pending',
      [ids.waiting]: 'waiting',
      [ids.pending]: 'pending',
    });
    const history = await readAttempts(ds, table);
    expect(history.map((h) => [h.messageId, h.outcome])).toEqual([
      [ids.dead, 'retry'],
      [ids.retrying, 'retry'],
      [ids.dead, 'dead'],
    ]);
    expect(await archivedIds()).toEqual([ids.archived]);
    expect((await outboxSchemaStatus(sql, { tableName: table })).messageIds).toEqual({
      layout: 'text',
      problem: null,
    });

    // The app is stopped; the conversion runs; the app starts again on the converted table.
    const conversion = await migrateOutboxToBinaryIds(sql, { tableName: table });
    expect(conversion).toEqual({
      layout: 'binary',
      converted: [`\`${table}\``, `\`${table}_attempts\``, `\`${table}_archive\``],
    });
    expect(await idColumnTypes(sql, table)).toEqual({
      [table]: 'binary(16)',
      [`${table}_attempts`]: 'binary(16)',
      [`${table}_archive`]: 'binary(16)',
    });
    // The indexes are back, the unique key unique.
    const { rows: keys } = await sql.query<{ name: string; non_unique: number | string }>(
      `SELECT INDEX_NAME AS name, MAX(NON_UNIQUE) AS non_unique FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?, ?) AND COLUMN_NAME = 'message_id' GROUP BY INDEX_NAME ORDER BY INDEX_NAME`,
      [table, `${table}_attempts`, `${table}_archive`],
    );
    expect(keys.map((k) => [k.name, Number(k.non_unique)])).toEqual([
      [`${table}_archive_msg`, 1],
      [`${table}_attempts_msg`, 1],
      [`${table}_message_id_key`, 0],
    ]);
    expect(Object.fromEntries(await readStatuses(ds, `\`${table}\``))).toEqual(
      Object.fromEntries(statuses),
    );
    expect(await readAttempts(ds, table)).toEqual(history);
    expect(await archivedIds()).toEqual([ids.archived]);
    expect((await outboxSchemaStatus(sql, { tableName: table })).messageIds).toEqual({
      layout: 'binary',
      problem: null,
    });

    const after = await storeOn();
    const admin = new OutboxAdmin(sql, after, { tableName: table });
    const dead = await admin.get(ids.dead);
    expect(dead?.messageId).toBe(ids.dead);
    expect(dead?.status).toBe('dead');
    expect(dead?.attemptHistory.map((a) => a.outcome)).toEqual(['retry', 'dead']);
    expect((await admin.list({ status: 'dead' })).items.map((m) => m.messageId)).toEqual([
      ids.dead,
    ]);
    expect((await admin.blockedKeys()).items.map((k) => k.headMessageId)).toEqual([ids.dead]);
    const why = await admin.why(ids.waiting);
    expect(why.state).toBe('parked');
    expect(why.head?.messageId).toBe(ids.dead);
    // A given id already there is reported, not written twice.
    expect(await enqueue(after, [{ ...row(null, ids.pending), idempotent: true }])).toEqual([
      ids.pending,
    ]);
    // The dead head goes back, is delivered, and its key moves on to the parked message.
    expect(await admin.retry([ids.dead])).toEqual({ requeued: 1, resequenced: 0, expired: [] });
    ({ batch, byKey } = await claimAll(after));
    expect(batch.records.map((r) => r.messageId).sort()).toEqual([ids.dead, ids.pending].sort());
    await after.settle(
      batch.token,
      { ...NONE, delivered: batch.records.map((r) => r.id), advancedKeys: ['d'] },
      false,
    );
    ({ batch } = await claimAll(after));
    expect(batch.records.map((r) => r.messageId)).toEqual([ids.waiting]);
    await after.settle(
      batch.token,
      { ...NONE, dead: [{ id: batch.records[0]?.id as string, error: 'x', errorClass: 'E' }] },
      false,
    );
    expect(await admin.purge([ids.waiting])).toBe(1);
    expect(await admin.get(ids.waiting)).toBeNull();
    // A second run has nothing left to do.
    expect(await migrateOutboxToBinaryIds(sql, { tableName: table })).toEqual({
      layout: 'binary',
      converted: [],
    });
  }, 60_000);

  it('the TypeORM migration converts and its down converts back, rows kept', async () => {
    await createChar36Tables(sql, table);
    const store = await storeOn();
    const ids = [randomUUID(), randomUUID()];
    await enqueue(
      store,
      ids.map((id, i) => row(`k${i}`, id)),
    );
    const Migration = createOutboxBinaryIdsMigration({ tableName: table });
    const runner = ds.createQueryRunner();
    try {
      await new Migration().up(runner);
      expect(await idColumnTypes(sql, table)).toEqual({
        [table]: 'binary(16)',
        [`${table}_attempts`]: 'binary(16)',
        [`${table}_archive`]: 'binary(16)',
      });
      expect([...(await readStatuses(ds, `\`${table}\``)).keys()]).toEqual(ids);
      await new Migration().down(runner);
      expect(await idColumnTypes(sql, table)).toEqual({
        [table]: 'char(36)',
        [`${table}_attempts`]: 'char(36)',
        [`${table}_archive`]: 'char(36)',
      });
      const { rows } = await sql.query<{ message_id: string }>(
        `SELECT message_id FROM \`${table}\` ORDER BY id`,
      );
      expect(rows.map((r) => r.message_id)).toEqual(ids);
    } finally {
      await runner.release();
    }
    // The store still runs on the table converted back.
    const again = await storeOn();
    const { batch } = await claimAll(again);
    expect(batch.records.map((r) => r.messageId)).toEqual(ids);
  });

  it('refuses a message_id of another type, and finishes an interrupted conversion', async () => {
    await createChar36Tables(sql, table);
    const store = await storeOn();
    const id = randomUUID();
    await enqueue(store, [row('k', id)]);
    // Interrupted after the new column was filled: the app refuses; a second run finishes.
    await sql.query(`ALTER TABLE \`${table}\` ADD COLUMN message_id_new BINARY(16) NULL`);
    await expect(storeOn()).rejects.toThrow(OutboxMessageIdLayoutError);
    await expect(storeOn()).rejects.toThrow(/--binary-ids/);
    await migrateOutboxToBinaryIds(sql, { tableName: table });
    const { batch } = await claimAll(await storeOn());
    expect(batch.records.map((r) => r.messageId)).toEqual([id]);

    await sql.query(`ALTER TABLE \`${table}_attempts\` MODIFY message_id VARCHAR(64) NOT NULL`);
    await expect(storeOn()).rejects.toThrow(OutboxMessageIdLayoutError);
    await expect(storeOn()).rejects.toThrow(/_attempts` is varchar\(64\)/);
    await expect(migrateOutboxToBinaryIds(sql, { tableName: table })).rejects.toThrow(
      OutboxMessageIdLayoutError,
    );
  });
});
