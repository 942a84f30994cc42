import { randomUUID } from 'node:crypto';
import { Test } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import { OutboxAdmin, OutboxOptionsError } from '../../lib';
import {
  ensureInboxTable,
  Inbox,
  InboxModule,
  InboxService,
  inboxTableDropDdl,
} from '../../lib/inbox';
import {
  dropOutboxTables,
  ensureOutboxTable,
  migrateOutboxToBinaryIds,
  outboxPartitions,
} from '../../lib/schema';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { testDatabase, uniqueTable } from '../support/databases';
import { describeWith } from '../support/services';

// Issue 75, item 15, the options objects left: the OutboxAdmin constructor's, outboxPartitions()
// and its policy, migrateOutboxToBinaryIds(), and the inbox's (new Inbox(), InboxModule,
// Inbox.purge(), the inbox table functions). Each is given a key it does not read, as a script
// written for another build or a typo would: refused with OutboxOptionsError naming the key and
// the accepted ones, and nothing done (every test reads the tables afterwards). The pure
// functions' refusals are in call-options-unknown-keys.unit.spec.ts.

/** The error a call fails with (its promise's, or its own), or an Error saying it did not fail. */
async function failureOf(call: () => unknown): Promise<unknown> {
  try {
    await call();
  } catch (error) {
    return error;
  }
  return new Error('not refused');
}

describeWith(['postgres'], 'unknown option keys of the calls left (PostgreSQL)', () => {
  const postgres = testDatabase('postgres');
  let ds: DataSource;
  let holder: string;

  beforeAll(async () => {
    holder = uniqueTable('gaps75_uk_base');
    ds = await postgres.open(holder);
  });

  afterAll(async () => {
    await postgres.close(ds, holder);
  });

  it('new OutboxAdmin() refuses an unknown key, naming the accepted ones; given known keys only, it reads its table', async () => {
    const table = uniqueTable('gaps75_uk_admin');
    await ensureOutboxTable(ds, { tableName: table });
    const sql = typeormSqlPort(ds);
    const store = await createOutboxStore(
      sql,
      { tableName: table, schema: null },
      { enabled: false, notify: false },
    );
    try {
      // `table` is not an option: the admin would have looked at (and repaired) `outbox`.
      const error = await failureOf(() => new OutboxAdmin(sql, store, { table } as never));
      expect(error).toBeInstanceOf(OutboxOptionsError);
      expect(error).toMatchObject({
        option: 'table',
        message:
          'Invalid new OutboxAdmin() options: table is not an option. Accepted options: ' +
          'tableName, schema, delivery, ordering, policies, dispatcher, cleaner, auditTable, ' +
          'tenants, erasure. Nothing was done.',
      });
      const nested = await failureOf(
        () =>
          new OutboxAdmin(sql, store, {
            tableName: table,
            ordering: { enabled: true, sequnce: true },
          } as never),
      );
      expect(nested).toMatchObject({ option: 'ordering.sequnce' });
      expect((nested as Error).message).toContain('did you mean ordering.sequence?');
      expect((nested as Error).message).toContain(
        'Accepted options: ordering.enabled, ordering.onDeadLetter, ordering.sequence, ordering.deadLetterExceptions.',
      );
      // The options it reads build an admin that reads this table.
      const admin = new OutboxAdmin(sql, store, {
        tableName: table,
        ordering: { enabled: true, sequence: false },
        dispatcher: { claims: 'leases' },
      });
      await ds.query(
        `INSERT INTO "${table}" (message_id, topic, message_key, event_type, payload, headers)
         VALUES ($1, 'orders', 'k', 'order.created', '{}', '{}')`,
        [randomUUID()],
      );
      expect((await admin.stats()).pending).toBe(1);
    } finally {
      await store.close();
      await dropOutboxTables(ds, { tableName: table });
    }
  });

  it('outboxPartitions() refuses an unknown key of its table and of its policy, and changes no partition', async () => {
    const table = uniqueTable('gaps75_uk_part');
    await ensureOutboxTable(ds, {
      tableName: table,
      partitioning: { interval: 'day', premake: 1 },
    });
    const sql = typeormSqlPort(ds);
    const policy = { premake: 1, retentionMs: 86_400_000, deadRetentionMs: null };
    try {
      const partitions = outboxPartitions(sql, { tableName: table });
      const before = (await partitions.status(policy, false)).partitions.map((p) => p.name);
      expect(before.length).toBeGreaterThan(1);

      const named = await failureOf(() => outboxPartitions(sql, { table } as never));
      expect(named).toBeInstanceOf(OutboxOptionsError);
      expect(named).toMatchObject({
        option: 'table',
        message:
          'Invalid outboxPartitions() options: table is not an option. Accepted options: ' +
          'tableName, schema. Nothing was done.',
      });
      // `retentionMS` is not `retentionMs`: the maintenance would run with no retention, and
      // `premake: 5` would make partitions ahead. Refused: nothing made, nothing dropped.
      const maintained = await failureOf(() =>
        partitions.maintain({ premake: 5, retentionMS: 0, deadRetentionMs: null } as never, false),
      );
      expect(maintained).toBeInstanceOf(OutboxOptionsError);
      expect(maintained).toMatchObject({ option: 'retentionMS' });
      expect((maintained as Error).message).toContain(
        'Invalid outboxPartitions().maintain() options: retentionMS is not an option; did you mean retentionMs? Accepted options: premake, retentionMs, deadRetentionMs.',
      );
      await expect(
        partitions.status({ ...policy, countrows: true } as never, false),
      ).rejects.toMatchObject({ option: 'countrows' });
      expect((await partitions.status(policy, false)).partitions.map((p) => p.name)).toEqual(
        before,
      );
    } finally {
      await dropOutboxTables(ds, { tableName: table });
    }
  });

  it('migrateOutboxToBinaryIds() refuses a key it does not read before anything else', async () => {
    // On PostgreSQL the conversion itself is refused (nothing to convert); the unknown key is
    // named first, as on MySQL/MariaDB, where it would have converted the default table.
    const error = await failureOf(() =>
      migrateOutboxToBinaryIds(typeormSqlPort(ds), { table: 'orders_outbox' } as never),
    );
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect(error).toMatchObject({
      option: 'table',
      message:
        'Invalid migrateOutboxToBinaryIds() options: table is not an option. Accepted options: ' +
        'tableName, schema. Nothing was done.',
    });
    // `with` and `online` are table options the conversion never read: refused too.
    await expect(
      migrateOutboxToBinaryIds(typeormSqlPort(ds), { with: ['tenants'] } as never),
    ).rejects.toMatchObject({ option: 'with' });
  });

  describe('the inbox', () => {
    let schema: string;
    let table: string;

    beforeEach(async () => {
      schema = uniqueTable('gaps75_uk_inbox_s');
      table = uniqueTable('gaps75_uk_inbox');
      await ds.query(`CREATE SCHEMA "${schema}"`);
      await ensureInboxTable(ds, { tableName: table, schema });
    });

    afterEach(async () => {
      for (const statement of inboxTableDropDdl('postgres', { tableName: table, schema })) {
        await ds.query(statement);
      }
      await ds.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    });

    const tablesInSchema = async (): Promise<string[]> =>
      (
        await ds.query<{ name: string }[]>(
          `SELECT table_name AS name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`,
          [schema],
        )
      ).map((r) => r.name);

    const recorded = async (): Promise<string[]> =>
      (
        await ds.query<{ id: string }[]>(
          `SELECT message_id AS id FROM "${schema}"."${table}" ORDER BY 1`,
        )
      ).map((r) => r.id);

    it('new Inbox() refuses an unknown key, in its sequence guard and repair too', async () => {
      const cases: [unknown, string, string][] = [
        [{ schema, table }, 'table', 'Accepted options: tableName, schema, sequence.'],
        [
          { schema, tableName: table, sequence: { onGAP: 'hold' } },
          'sequence.onGAP',
          'did you mean sequence.onGap? Accepted options: sequence.onGap, sequence.holdMs, sequence.repair.',
        ],
        [
          {
            schema,
            tableName: table,
            sequence: {
              onGap: 'hold',
              repair: { client: { ask: () => Promise.resolve({}) }, topic: 'orders', afterMS: 10 },
            },
          },
          'sequence.repair.afterMS',
          'did you mean sequence.repair.afterMs?',
        ],
      ];
      for (const [options, key, says] of cases) {
        const error = await failureOf(() => new Inbox(ds, options as never));
        expect(error).toBeInstanceOf(OutboxOptionsError);
        expect(error).toMatchObject({ option: key });
        expect((error as Error).message).toContain(
          `Invalid new Inbox() options: ${key} is not an option`,
        );
        expect((error as Error).message).toContain(says);
      }
      // A known key set builds an inbox on this table, which records ids there.
      const inbox = new Inbox(ds, { schema, tableName: table, sequence: { onGap: 'accept' } });
      const id = randomUUID();
      await inbox.handleOnce(ds, { messageId: id, consumer: 'billing' }, () => Promise.resolve());
      expect(await recorded()).toEqual([id]);
    });

    it('Inbox.purge() refuses an unknown key and deletes nothing', async () => {
      const inbox = new Inbox(ds, { schema, tableName: table });
      const id = randomUUID();
      await inbox.handleOnce(ds, { messageId: id, consumer: 'billing' }, () => Promise.resolve());
      const error = await failureOf(() => inbox.purge(0, { batchsize: 1 } as never));
      expect(error).toBeInstanceOf(OutboxOptionsError);
      expect(error).toMatchObject({
        option: 'batchsize',
        message:
          'Invalid Inbox.purge() options: batchsize is not an option; did you mean batchSize? ' +
          'Accepted options: batchSize. Nothing was done.',
      });
      expect(await recorded()).toEqual([id]);
      expect(await inbox.purge(0, { batchSize: 1 })).toBe(1);
      expect(await recorded()).toEqual([]);
    });

    it('ensureInboxTable() refuses an unknown key instead of making the default table', async () => {
      const before = await tablesInSchema();
      // `table` is not an option: `inbox` would have been made in the schema.
      const error = await failureOf(() =>
        ensureInboxTable(ds, { schema, table: 'billing' } as never),
      );
      expect(error).toBeInstanceOf(OutboxOptionsError);
      expect(error).toMatchObject({ option: 'table' });
      expect((error as Error).message).toContain(
        'Invalid ensureInboxTable() options: table is not an option. Accepted options: tableName, schema.',
      );
      expect(await tablesInSchema()).toEqual(before);
    });

    it('InboxModule refuses an unknown key in forRoot() and in the forRootAsync() factory result', async () => {
      const sync = await failureOf(() =>
        InboxModule.forRoot({ dataSource: ds, schema, tableNmae: table } as never),
      );
      expect(sync).toBeInstanceOf(OutboxOptionsError);
      expect(sync).toMatchObject({ option: 'tableNmae' });
      expect((sync as Error).message).toContain(
        'Invalid InboxModule.forRoot() options: tableNmae is not an option; did you mean tableName? Accepted options: tableName, schema, sequence, dataSource, connection, isGlobal.',
      );
      const factory = await failureOf(async () => {
        const moduleRef = await Test.createTestingModule({
          imports: [
            InboxModule.forRootAsync({
              isGlobal: false,
              useFactory: () => ({ dataSource: ds, schema, tableName: table, isGlobal: true }),
            }),
          ],
        }).compile();
        await moduleRef.close();
      });
      expect(factory).toBeInstanceOf(OutboxOptionsError);
      expect(factory).toMatchObject({ option: 'isGlobal' });
      expect((factory as Error).message).toContain(
        'Invalid InboxModule.forRootAsync() factory options: isGlobal is not an option.',
      );
      // Given as the module reads them, both build the service on this table.
      const moduleRef = await Test.createTestingModule({
        imports: [
          InboxModule.forRootAsync({
            isGlobal: false,
            useFactory: () => ({ dataSource: ds, schema, tableName: table }),
          }),
        ],
      }).compile();
      try {
        const id = randomUUID();
        await moduleRef
          .get(InboxService)
          .handleOnce(ds, { messageId: id, consumer: 'billing' }, () => Promise.resolve());
        expect(await recorded()).toEqual([id]);
      } finally {
        await moduleRef.close();
      }
    });
  });
});
