import { randomUUID } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
import { OutboxTableMissingError } from '../../lib';
import { typeormSqlPort, typeormSqlRunner } from '../../lib/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import { MYSQL_KEY_LOCK_BUCKETS } from '../../lib/store/mysql/mysql.sql';
import { hashKey } from '../../lib/store/rows/outbox-row.mapper';
import type { OutboxStore } from '../../lib/store/ports/outbox-store.port';
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
