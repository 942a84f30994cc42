import { Test, type TestingModule } from '@nestjs/testing';
import { DataSource } from 'typeorm';
import {
  OutboxModule,
  OutboxService,
  OutboxTableMissingError,
  type OutboxMessage,
} from '../../lib';
import { ensureOutboxTable, outboxTableDdl } from '../../lib/schema';
import { MYSQL_KEY_LOCK_BUCKETS } from '../../lib/store/mysql/mysql.sql';
import { hashKey } from '../../lib/store/rows/outbox-row.mapper';
import { dropOutboxTable, quoteTable } from '../support/outbox-harness';
import {
  serverOptions,
  storedId,
  TEST_DATABASES,
  testDatabase,
  uniqueTable,
} from '../support/databases';
import { instance } from '../support/outbox-harness';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { sleep } from '../support/wait-for';

// What the module checks about its tables at bootstrap, and how it names its locks and
// channels after the schema the table really lives in.

const msg = (key: string): OutboxMessage => ({
  topic: 'orders',
  type: 'order.event',
  key,
  payload: {},
});

async function boot(ds: DataSource, tableName: string) {
  const moduleRef = await Test.createTestingModule({
    imports: [
      OutboxModule.forRoot({
        dataSource: ds,
        tableName,
        publisher: new RecordingPublisher(),
        autoStart: false,
        dispatcher: { listen: false },
      }),
    ],
  }).compile();
  await moduleRef.init();
  return moduleRef;
}

const mariadb = testDatabase('mariadb');
const postgres = testDatabase('postgres');

describeWith(['mariadb'], 'the MySQL/MariaDB key-lock table at bootstrap', () => {
  let ds: DataSource;
  let table: string;

  beforeEach(async () => {
    table = uniqueTable('outbox_klk');
    ds = await mariadb.open(table);
  });

  afterEach(async () => {
    await dropOutboxTable(ds, table);
    await ds.destroy();
  });

  it('a missing key-lock table fails the start with a typed error naming the fix', async () => {
    await ds.query(`DROP TABLE ${quoteTable(ds, `${table}_key_lock`)}`);
    const error = await boot(ds, table).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OutboxTableMissingError);
    expect(String((error as Error).message)).toMatch(/key-lock table .* cannot be read/);
    expect(String((error as Error).message)).toContain(`outbox schema migrate --table ${table}`);
  });

  it('a key-lock table missing one row fails the start instead of leaving that key unserialised', async () => {
    await ds.query(`DELETE FROM ${quoteTable(ds, `${table}_key_lock`)} WHERE bucket = 4242`);
    const error = await boot(ds, table).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OutboxTableMissingError);
    expect(String((error as Error).message)).toMatch(/holds 131071 of its 131072 rows/);
  });

  it('a bucket row lost after the start fails an enqueue of several keys, which then writes nothing', async () => {
    const moduleRef = await boot(ds, table);
    try {
      const outbox = moduleRef.get(OutboxService);
      const bucket = hashKey('lost-bucket') % MYSQL_KEY_LOCK_BUCKETS;
      await ds.query(`DELETE FROM ${quoteTable(ds, `${table}_key_lock`)} WHERE bucket = ?`, [
        bucket,
      ]);
      const error = await ds
        .transaction((m) => outbox.enqueue([msg('fine-bucket'), msg('lost-bucket')], m))
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(OutboxTableMissingError);
      expect(String((error as Error).message)).toContain('has 1 of the 2 bucket rows');
      expect(await ds.query(`SELECT id FROM ${quoteTable(ds, table)}`)).toEqual([]);
    } finally {
      await moduleRef.close();
    }
  });

  it('a complete key-lock table starts', async () => {
    const moduleRef = await boot(ds, table);
    await moduleRef.close();
  });
});

describeWith(['mariadb'], 'MySQL/MariaDB keys, topics and types compared byte for byte', () => {
  let ds: DataSource;
  let table: string;
  const modules: { close(): Promise<void> }[] = [];

  beforeEach(async () => {
    table = uniqueTable('outbox_nopad');
    ds = await mariadb.open(table);
  });

  afterEach(async () => {
    for (const m of modules.splice(0)) await m.close();
    await dropOutboxTable(ds, table);
    await ds.destroy();
  });

  it("'k' and 'k ' are two keys, and a purge of topic 'orders' leaves 'orders '", async () => {
    const d = await instance(ds, table, 'nopad');
    modules.push(d.moduleRef);
    const [head] = await ds.transaction((m) =>
      d.outbox.enqueue(
        [
          { ...msg('k'), topic: 'orders' },
          { ...msg('k '), topic: 'orders ' },
        ],
        m,
      ),
    );
    // The head of 'k' dies; under 'block' it holds 'k' but must not hold 'k '.
    d.publisher.fail(String(head), 'permanent');
    await d.dispatcher.drain();
    await d.dispatcher.drain();
    expect(d.publisher.sentForKey('k ')).toHaveLength(1);
    await ds.transaction((m) => d.outbox.enqueue({ ...msg('k '), topic: 'orders ' }, m));
    d.publisher.fail({ topic: 'orders ' }, 'permanent');
    await d.dispatcher.drain();
    expect((await d.admin.counts()).dead).toBe(2);
    expect(await d.admin.purgeWhere({ topic: 'orders' })).toBe(1);
    const left = await d.admin.list({ status: 'dead' });
    expect(left.items.map((i) => i.topic)).toEqual(['orders ']);
  });

  it('a table made before 0.3 (PAD SPACE columns) fails the start, and the migration fixes it in place', async () => {
    const t = quoteTable(ds, table);
    await ds.query(
      `ALTER TABLE ${t} MODIFY topic VARCHAR(255) COLLATE utf8mb4_bin NOT NULL, MODIFY message_key VARCHAR(255) COLLATE utf8mb4_bin NULL, MODIFY event_type VARCHAR(255) COLLATE utf8mb4_bin NOT NULL`,
    );
    await ds.query(
      `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers) VALUES (?, 'orders', 'k', 't', '{}', '{}')`,
      [storedId('mariadb', '0190a6b2-1c3d-7e4f-8a9b-0c1d2e3f4a01')],
    );
    const error = await boot(ds, table).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OutboxTableMissingError);
    expect(String((error as Error).message)).toMatch(/ignoring trailing spaces/);
    expect(String((error as Error).message)).toContain('outbox schema migrate');

    await ensureOutboxTable(ds, { tableName: table }); // what `outbox schema migrate` runs
    const moduleRef = await boot(ds, table);
    modules.push(moduleRef);
    const rows = await ds.query<{ message_key: string }[]>(`SELECT message_key FROM ${t}`);
    expect(rows).toEqual([{ message_key: 'k' }]);
  });

  it("outboxTableDdl's statements, run as a migration tool runs them, make a table that starts; run again they change nothing, and they fix a PAD SPACE table", async () => {
    const own = uniqueTable('outbox_ddl');
    const t = quoteTable(ds, own);
    // One connection, statement by statement: the server picks its NO PAD collation in a
    // session variable.
    const migrate = async (dialect: 'mysql' | 'mariadb'): Promise<void> => {
      const runner = ds.createQueryRunner();
      try {
        for (const statement of outboxTableDdl(dialect, { tableName: own })) {
          await runner.query(statement);
        }
      } finally {
        await runner.release();
      }
    };
    const collations = async (): Promise<string[]> =>
      (
        await ds.query<{ k: string }[]>(
          `SELECT COLLATION_NAME AS k FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME IN ('topic', 'message_key', 'event_type')`,
          [own],
        )
      ).map((r) => r.k);
    try {
      await migrate('mysql');
      expect(await collations()).toEqual(Array(3).fill('utf8mb4_nopad_bin'));
      modules.push(await boot(ds, own));
      await ds.query(
        `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers) VALUES (?, 'orders', 'k', 't', '{}', '{}')`,
        [storedId('mariadb', '0190a6b2-1c3d-7e4f-8a9b-0c1d2e3f4a02')],
      );
      await migrate('mariadb');
      expect(await collations()).toEqual(Array(3).fill('utf8mb4_nopad_bin'));

      // As a table made before 0.3: the same statements move it, rows kept.
      await ds.query(
        `ALTER TABLE ${t} MODIFY topic VARCHAR(255) COLLATE utf8mb4_bin NOT NULL, MODIFY message_key VARCHAR(255) COLLATE utf8mb4_bin NULL, MODIFY event_type VARCHAR(255) COLLATE utf8mb4_bin NOT NULL`,
      );
      await migrate('mysql');
      expect(await collations()).toEqual(Array(3).fill('utf8mb4_nopad_bin'));
      modules.push(await boot(ds, own));
      expect(await ds.query(`SELECT message_key FROM ${t}`)).toEqual([{ message_key: 'k' }]);
    } finally {
      await dropOutboxTable(ds, own);
    }
  });

  it("a table made before the cleaner's index gains it in place from the migration, rows kept", async () => {
    const t = quoteTable(ds, table);
    await ds.query(`ALTER TABLE ${t} DROP INDEX \`${table}_done_idx\``);
    await ds.query(
      `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers) VALUES (?, 'orders', 'k', 't', '{}', '{}')`,
      [storedId('mariadb', '0190a6b2-1c3d-7e4f-8a9b-0c1d2e3f4a02')],
    );
    const indexes = async (): Promise<string[]> =>
      (
        await ds.query<{ name: string }[]>(
          `SELECT DISTINCT INDEX_NAME AS name FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`,
          [table],
        )
      )
        .map((r) => r.name)
        .sort();
    expect(await indexes()).not.toContain(`${table}_done_idx`);

    await ensureOutboxTable(ds, { tableName: table }); // what `outbox schema migrate` runs
    expect(await indexes()).toContain(`${table}_done_idx`);
    // Running it again changes nothing (the index is not added twice).
    await ensureOutboxTable(ds, { tableName: table });
    expect(await ds.query(`SELECT message_key FROM ${t}`)).toEqual([{ message_key: 'k' }]);
  });
});

for (const db of TEST_DATABASES) {
  describeWith(
    db.service === null ? [] : [db.service],
    `the attempt history at bootstrap [${db.name}]`,
    () => {
      let ds: DataSource;
      let table: string;

      beforeEach(async () => {
        table = uniqueTable('outbox_hist');
        ds = await db.open(table);
      });

      afterEach(() => db.close(ds, table));

      it('a table without it (as 0.3 made it) fails the start naming both fixes; schema migrate adds it in place', async () => {
        await ds.query(`DROP TABLE ${quoteTable(ds, `${table}_attempts`)}`);
        const t = quoteTable(ds, table);
        await ds.query(
          `INSERT INTO ${t} (message_id, topic, message_key, event_type, payload, headers) VALUES (${ds.options.type === 'postgres' ? '$1' : '?'}, 'orders', 'k', 't', '{}', '{}')`,
          [storedId(ds.options.type, '0190a6b2-1c3d-7e4f-8a9b-0c1d2e3f4a02')],
        );
        const error = await boot(ds, table).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(OutboxTableMissingError);
        const message = String((error as Error).message);
        expect(message).toContain(`attempt-history table ${quoteTable(ds, `${table}_attempts`)}`);
        expect(message).toContain(`npx outbox schema migrate --table ${table}`);
        expect(message).toContain(`...outboxMigrations({ tableName: '${table}' })`);
        expect((error as OutboxTableMissingError).table).toBe(quoteTable(ds, `${table}_attempts`));

        await ensureOutboxTable(ds, { tableName: table }); // what `outbox schema migrate` runs
        const moduleRef = await boot(ds, table);
        await moduleRef.close();
        const rows = await ds.query<{ n: number | string }[]>(`SELECT count(*) AS n FROM ${t}`);
        expect(Number(rows[0]?.n)).toBe(1);
      });
    },
  );
}

describeWith(['postgres'], 'PostgreSQL tenants with a schema each', () => {
  const tenants = ['a', 'b'].map((t) => `outbox_tenant_${t}_${process.pid}`);
  const table = uniqueTable('outbox_tenant');
  const sources: DataSource[] = [];

  beforeAll(async () => {
    const admin = await postgres.open(uniqueTable('outbox_adm'));
    for (const schema of tenants) await admin.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
    await admin.destroy();
    for (const schema of tenants) {
      // Each tenant's connections resolve unqualified names in its own schema.
      const ds = new DataSource(
        serverOptions('postgres', { extra: { options: `-c search_path=${schema}` } }),
      );
      await ds.initialize();
      await ensureOutboxTable(ds, { tableName: table });
      sources.push(ds);
    }
  });

  afterAll(async () => {
    for (const ds of sources) await ds.destroy();
    const admin = await postgres.open(uniqueTable('outbox_adm'));
    for (const schema of tenants) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.destroy();
  });

  it("one tenant's enqueue never waits on another tenant's open transaction for the same key", async () => {
    const [a, b] = (await Promise.all(sources.map((ds) => boot(ds, table)))) as [
      TestingModule,
      TestingModule,
    ];
    const [dsA, dsB] = sources as [DataSource, DataSource];
    try {
      let finishA!: () => void;
      const holdA = new Promise<void>((resolve) => (finishA = resolve));
      let enqueuedA!: () => void;
      const inA = new Promise<void>((resolve) => (enqueuedA = resolve));
      const txA = dsA.transaction(async (m) => {
        await a.get(OutboxService).enqueue(msg('k'), m);
        enqueuedA();
        await holdA;
      });
      await inA;
      const enqueueB = dsB.transaction((m) => b.get(OutboxService).enqueue(msg('k'), m));
      const firstDone = await Promise.race([
        enqueueB.then(() => 'b'),
        sleep(3_000).then(() => 'timeout'),
      ]);
      finishA();
      await txA;
      await enqueueB;
      expect(firstDone).toBe('b');
      const counts = await Promise.all(
        sources.map(async (ds) =>
          Number((await ds.query(`SELECT count(*) AS n FROM "${table}"`))[0].n),
        ),
      );
      expect(counts).toEqual([1, 1]);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
