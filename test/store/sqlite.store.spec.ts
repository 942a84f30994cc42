import { randomUUID } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
import { typeormSqlPort, typeormSqlRunner } from '../../lib/orm/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import type { OutboxStore } from '../../lib/store/outbox-store.port';
import { TEST_DATABASES, readOutbox, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';
import { outboxStoreConformance, typeormOn } from './outbox-store.conformance';

const db = TEST_DATABASES.find((d) => d.name === 'sqlite');
if (db === undefined) throw new Error('no sqlite test database');

outboxStoreConformance(typeormOn(db), []);

describeWith([], 'SQLite store: runs', () => {
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
});
