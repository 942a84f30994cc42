import { randomUUID } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
import { OutboxTableMissingError } from '../../lib';
import { typeormSqlPort, typeormSqlRunner } from '../../lib/orm/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import { MYSQL_KEY_LOCK_BUCKETS } from '../../lib/store/mysql/mysql.sql';
import { hashKey } from '../../lib/store/outbox-row.mapper';
import type { OutboxStore } from '../../lib/store/outbox-store.port';
import { TEST_DATABASES, readOutbox, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { outboxStoreConformance, typeormOn } from './outbox-store.conformance';
import { createChar36Tables, idColumnTypes } from '../support/mysql-char36-tables';

const db = TEST_DATABASES.find((d) => d.name === 'mariadb');
if (db === undefined) throw new Error('no mariadb test database');

// New tables store message ids as BINARY(16); tables made before keep CHAR(36) and must work
// unchanged: the whole suite runs on both.
outboxStoreConformance(typeormOn(db), ['mariadb']);
outboxStoreConformance(
  {
    ...typeormOn(db),
    name: 'typeorm-mariadb, CHAR(36) ids',
    async createTable(sql, tableName) {
      await createChar36Tables(sql, tableName);
      const types = await idColumnTypes(sql, tableName);
      if (types[tableName] !== 'char(36)' || types[`${tableName}_attempts`] !== 'char(36)')
        throw new Error(`not a CHAR(36) table: ${JSON.stringify(types)}`);
    },
  },
  ['mariadb'],
);

describeWith(['mariadb'], 'MySQL/MariaDB store: one message of a key', () => {
  let ds: DataSource;
  let table: string;
  let store: OutboxStore;

  beforeEach(async () => {
    table = uniqueTable('outbox_one');
    ds = await db.open(table);
    store = await createOutboxStore(
      typeormSqlPort(ds),
      { tableName: table, schema: null, ordering: { enabled: true, onDeadLetter: 'block' } },
      { enabled: false, notify: false },
    );
  });
  afterEach(async () => {
    await db.close(ds, table);
  });

  const insertOne = (key: string): Promise<readonly string[]> =>
    ds.transaction((m) =>
      store.insert(
        typeormSqlRunner(m.queryRunner as QueryRunner),
        [
          {
            messageId: randomUUID(),
            topic: 't',
            key,
            type: 'T',
            payload: '{}',
            headers: '{}',
            availableAt: null,
            delayMs: null,
          },
        ],
        true,
      ),
    );

  it('fails the enqueue, writing nothing, when its key has no lock row (never a silent loss)', async () => {
    // The lock and the row are one statement: with the bucket row gone, the row would be too.
    const bucket = hashKey('k') % MYSQL_KEY_LOCK_BUCKETS;
    await ds.query(`DELETE FROM \`${table}_key_lock\` WHERE bucket = ?`, [bucket]);
    await expect(insertOne('k')).rejects.toBeInstanceOf(OutboxTableMissingError);
    expect(await readOutbox(ds, table)).toEqual([]);
    // Another key's bucket is there: its message is written.
    const other = ['a', 'b', 'c', 'd'].find((k) => hashKey(k) % MYSQL_KEY_LOCK_BUCKETS !== bucket);
    await insertOne(other as string);
    expect((await readOutbox(ds, table)).map((r) => r.key)).toEqual([other]);
  });
});

describeWith(['mariadb'], 'MySQL/MariaDB store: runs', () => {
  let ds: DataSource;
  let table: string;
  let store: OutboxStore;

  beforeEach(async () => {
    table = uniqueTable('outbox_runs');
    ds = await db.open(table);
    store = await createOutboxStore(
      typeormSqlPort(ds),
      {
        tableName: table,
        schema: null,
        ordering: { enabled: true, onDeadLetter: 'block', maxRun: 3 },
      },
      { enabled: false, notify: false },
    );
  });
  afterEach(async () => {
    await store.close();
    await db.close(ds, table);
  });

  it('claims a key head and the messages right behind it, up to maxRun, then the rest after delivery', async () => {
    await ds.transaction((m) =>
      store.insert(
        typeormSqlRunner(m.queryRunner as QueryRunner),
        Array.from({ length: 5 }, () => ({
          messageId: randomUUID(),
          topic: 't',
          key: 'k',
          type: 'T',
          payload: '{}',
          headers: '{}',
          availableAt: null,
          delayMs: null,
        })),
        true,
      ),
    );
    const queue = (await readOutbox(ds, table)).map((r) => r.id);
    const claim = () => store.claim({ limit: 10, owner: 'runs', leaseMs: 60_000 });
    const first = await claim();
    expect(first.records.map((r) => r.id).sort()).toEqual(queue.slice(0, 3).sort());
    expect(first.blockedKeys).toEqual(['k']);
    await store.park(['k']);
    expect((await readOutbox(ds, table)).map((r) => r.status)).toEqual([
      'pending',
      'pending',
      'pending',
      'waiting',
      'waiting',
    ]);
    await store.settle(
      first.token,
      {
        delivered: first.records.map((r) => r.id),
        retry: [],
        dead: [],
        release: [],
        advancedKeys: ['k'],
      },
      false,
    );
    const second = await claim();
    expect(second.records.map((r) => r.id).sort()).toEqual(queue.slice(3).sort());
    expect(second.blockedKeys).toEqual([]);
  });

  it('never leases part of a run whose earlier row another transaction holds', async () => {
    await ds.transaction((m) =>
      store.insert(
        typeormSqlRunner(m.queryRunner as QueryRunner),
        Array.from({ length: 3 }, () => ({
          messageId: randomUUID(),
          topic: 't',
          key: 'k',
          type: 'T',
          payload: '{}',
          headers: '{}',
          availableAt: null,
          delayMs: null,
        })),
        true,
      ),
    );
    const queue = (await readOutbox(ds, table)).map((r) => r.id);
    const claim = () => store.claim({ limit: 10, owner: 'runs', leaseMs: 60_000 });
    // Another dispatcher's claim holds a row, as between its lock and its commit.
    const holding = async (id: string, work: () => Promise<void>): Promise<void> => {
      const other = ds.createQueryRunner();
      await other.startTransaction();
      try {
        await other.query(`SELECT id FROM \`${table}\` WHERE id = ? FOR UPDATE`, [id]);
        await work();
      } finally {
        await other.rollbackTransaction();
        await other.release();
      }
    };
    // The head held: nothing behind it may go.
    await holding(queue[0] as string, async () => {
      expect((await claim()).records).toEqual([]);
    });
    // The second held: the head goes alone, the third stays.
    await holding(queue[1] as string, async () => {
      expect((await claim()).records.map((r) => r.id)).toEqual([queue[0]]);
    });
    expect((await readOutbox(ds, table)).map((r) => r.lockedBy)).toEqual(['runs', null, null]);
  });
});
