import { Test } from '@nestjs/testing';
import { DataSource, type MigrationInterface, type QueryRunner } from 'typeorm';
import { OutboxModule, OutboxOptionsError, OutboxTableMissingError } from '../../lib';
import {
  createOutboxMigration,
  createOutboxArchiveMigration,
  outboxMigrations,
} from '../../lib/schema';
import { createInboxMigration } from '../../lib/inbox';
import {
  outboxDatabase,
  outboxDialectOf,
  tableNamesFor,
} from '../../lib/store/schema/outbox-table-ddl';
import { outboxSchemaStatus } from '../../lib/store/schema/schema-status';
import { OUTBOX_SCHEMA_STEPS, OUTBOX_STEP_OPTIONS } from '../../lib/store/schema/schema-steps';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { storedId, TEST_DATABASES, uniqueTable } from '../support/databases';
import { dropOutboxTable, quoteTable } from '../support/outbox-harness';

// The TypeORM migrations of the outbox and inbox tables: several in one DataSource, the upgrade
// from a 0.1 table as the README describes it, and the boot error that says what fixes it.

/** What 0.1's migration left: its name, and a table without the columns 0.2 added. */
function version01Migration(table: string): new () => MigrationInterface {
  return class CreateOutboxTable implements MigrationInterface {
    readonly name = 'CreateOutboxTable1763800000000';

    async up(runner: QueryRunner): Promise<void> {
      const dialect = outboxDialectOf(runner.connection.options.type);
      const names = tableNamesFor(dialect, { tableName: table });
      for (const sql of outboxDatabase(dialect).schema.createTable(names)) await runner.query(sql);
      const quoted = quoteTable(runner.connection, table);
      // 0.1 had no index on the columns it lacked (SQLite refuses to drop an indexed column).
      await runner
        .query(`DROP INDEX IF EXISTS ${quoteTable(runner.connection, `${table}_dead_idx`)}`)
        .catch(() => undefined);
      await runner.query(`ALTER TABLE ${quoted} DROP COLUMN dead_at`);
      await runner.query(`ALTER TABLE ${quoted} DROP COLUMN last_attempt_at`);
    }

    async down(): Promise<void> {}
  };
}

const failureOf = (promise: Promise<unknown>): Promise<unknown> =>
  promise.then(
    () => undefined,
    (error: unknown) => error,
  );

describe('createOutboxMigration() names and arguments', () => {
  it('names each migration after its table, ending with the timestamp TypeORM sorts by', () => {
    const name = (migration: new () => MigrationInterface): string | undefined =>
      new migration().name;
    expect(name(createOutboxMigration())).toBe('CreateOutboxTable_outbox_1763800000000');
    expect(name(createOutboxMigration({ tableName: 'orders_outbox', schema: 'events' }))).toBe(
      'CreateOutboxTable_events.orders_outbox_1763800000000',
    );
    expect(name(createOutboxMigration({ tableName: 'audit' }, 1_700_000_000_000))).toBe(
      'CreateOutboxTable_audit_1700000000000',
    );
    expect(name(createInboxMigration({ tableName: 'orders_inbox' }))).toBe(
      'CreateInboxTable_orders_inbox_1763900000000',
    );
  });

  it('outboxMigrations() starts with createOutboxMigration() and names each later step after its table', () => {
    const names = (list: (new () => MigrationInterface)[]): (string | undefined)[] =>
      list.map((m) => new m().name);
    expect(names(outboxMigrations({ with: OUTBOX_STEP_OPTIONS }))).toEqual([
      'CreateOutboxTable_outbox_1763800000000',
      'AddOutboxAttemptHistory_outbox_1763800000001',
      'AddOutboxCleanerIndexes_outbox_1763800000002',
      'AddOutboxPayloadColumns_outbox_1763800000003',
      'AddOutboxWaitingIndex_outbox_1763800000004',
      'AddOutboxKeySequence_outbox_1763800000005',
      'AddOutboxTenantColumn_outbox_1763800000006',
      'AllowOutboxFallbackOutcome_outbox_1763800000007',
      'AddOutboxDeliveryPartitions_outbox_1763800000008',
      'AddOutboxClaimChecks_outbox_1763800000009',
      'AddOutboxSubjectKeys_outbox_1763800000010',
    ]);
    expect(
      names(
        outboxMigrations(
          { tableName: 'audit', schema: 'events', with: OUTBOX_STEP_OPTIONS },
          1_700_000_000_000,
        ),
      ),
    ).toEqual([
      new (createOutboxMigration({ tableName: 'audit', schema: 'events' }, 1_700_000_000_000))()
        .name,
      'AddOutboxAttemptHistory_events.audit_1700000000001',
      'AddOutboxCleanerIndexes_events.audit_1700000000002',
      'AddOutboxPayloadColumns_events.audit_1700000000003',
      'AddOutboxWaitingIndex_events.audit_1700000000004',
      'AddOutboxKeySequence_events.audit_1700000000005',
      'AddOutboxTenantColumn_events.audit_1700000000006',
      'AllowOutboxFallbackOutcome_events.audit_1700000000007',
      'AddOutboxDeliveryPartitions_events.audit_1700000000008',
      'AddOutboxClaimChecks_events.audit_1700000000009',
      'AddOutboxSubjectKeys_events.audit_1700000000010',
    ]);
    expect(() => outboxMigrations({ tableName: 'x; DROP TABLE y' })).toThrow(OutboxOptionsError);
  });

  it('refuses a timestamp TypeORM could not read back from the name', () => {
    for (const timestamp of [0, -1, 1.5, 10_000_000_000_000, Number.NaN]) {
      expect(() => createOutboxMigration({}, timestamp)).toThrow(OutboxOptionsError);
      expect(() => createInboxMigration({}, timestamp)).toThrow(OutboxOptionsError);
      expect(() => outboxMigrations({}, timestamp)).toThrow(OutboxOptionsError);
    }
  });
});

describe.each(TEST_DATABASES)('outbox migrations on $name', (db) => {
  let base: DataSource;
  let scratch: string;
  const opened: DataSource[] = [];

  beforeEach(async () => {
    scratch = uniqueTable('outbox_mig');
    base = await db.open(scratch);
  });

  afterEach(async () => {
    for (const ds of opened.splice(0)) await ds.destroy();
    await base.query(`DROP TABLE IF EXISTS ${quoteTable(base, `${scratch}_migrations`)}`);
    await db.close(base, scratch);
  });

  /** A second DataSource on the same database, with these migrations. */
  async function withMigrations(migrations: (new () => MigrationInterface)[]): Promise<DataSource> {
    const ds = new DataSource({
      ...base.options,
      entities: [],
      synchronize: false,
      migrations,
      migrationsTableName: `${scratch}_migrations`,
    });
    await ds.initialize();
    opened.push(ds);
    return ds;
  }

  const columnsOf20 = (ds: DataSource, table: string): Promise<unknown> =>
    ds.query(`SELECT last_attempt_at, dead_at FROM ${quoteTable(ds, table)} WHERE 1 = 0`);
  const historyOf = (ds: DataSource, table: string): Promise<unknown> =>
    ds.query(
      `SELECT message_id, attempt, outcome, locked_by, error_class, error, failed_at FROM ${quoteTable(ds, `${table}_attempts`)} WHERE 1 = 0`,
    );
  /** Writes one attempt-history row with `outcome` (the message need not exist). */
  const insertAttempt = (ds: DataSource, table: string, outcome: string): Promise<unknown> => {
    const p = (i: number): string => (db.name === 'postgres' ? `$${i}` : '?');
    return ds.query(
      `INSERT INTO ${quoteTable(ds, `${table}_attempts`)} (message_id, attempt, outcome, locked_by, error_class, error) VALUES (${[1, 2, 3, 4, 5, 6].map(p).join(', ')})`,
      [
        storedId(ds.options.type, '0190d6b4-0000-7000-8000-000000000001'),
        1,
        outcome,
        'dispatcher-1',
        'PermanentPublishError',
        `${outcome}: refused`,
      ],
    );
  };
  const sqlPortOf = (ds: DataSource) => typeormSqlPort(ds);
  const payloadColumnsOf = (ds: DataSource, table: string): Promise<unknown> =>
    ds.query(
      `SELECT payload_encoding, content_type, payload_bytes, broker_attributes FROM ${quoteTable(ds, table)} WHERE 1 = 0`,
    );
  /** The cleaner's indexes the table has, by name, sorted. */
  /** Schema step 5's index, where the table has it (only PostgreSQL's can). */
  async function waitingIndexOf(ds: DataSource, table: string): Promise<string[]> {
    if (db.name !== 'postgres') return [];
    const rows = await ds.query<{ name: string }[]>(
      `SELECT indexname AS name FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1 AND indexname = $2`,
      [table, `${table}_waiting_idx`],
    );
    return rows.map((r) => String(r.name));
  }

  async function cleanerIndexesOf(ds: DataSource, table: string): Promise<string[]> {
    const wanted = [`${table}_delivered_idx`, `${table}_dead_idx`, `${table}_done_idx`];
    const sql =
      db.name === 'postgres'
        ? `SELECT indexname AS name FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1`
        : db.name === 'mariadb'
          ? `SELECT DISTINCT INDEX_NAME AS name FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`
          : `SELECT name FROM pragma_index_list(?)`;
    const rows = await ds.query<{ name: string }[]>(sql, [table]);
    return rows
      .map((r) => String(r.name))
      .filter((n) => wanted.includes(n))
      .sort();
  }

  const bootOn = (tableName: string) =>
    failureOf(
      Test.createTestingModule({
        imports: [OutboxModule.forRoot({ dataSource: base, tableName, workers: false })],
      })
        .compile()
        .then((app) => app.close()),
    );

  it('runs two outbox migrations and an inbox migration in one DataSource', async () => {
    const [first, second, inbox] = [`${scratch}_a`, `${scratch}_b`, `${scratch}_in`];
    const ds = await withMigrations([
      ...outboxMigrations({ tableName: first, with: OUTBOX_STEP_OPTIONS }),
      ...outboxMigrations({ tableName: second, with: OUTBOX_STEP_OPTIONS }),
      createInboxMigration({ tableName: inbox }),
    ]);
    try {
      const ran = await ds.runMigrations();
      expect(ran.map((m) => m.name).sort()).toEqual(
        [
          `CreateInboxTable_${inbox}_1763900000000`,
          `CreateOutboxTable_${first}_1763800000000`,
          `AddOutboxAttemptHistory_${first}_1763800000001`,
          `AddOutboxCleanerIndexes_${first}_1763800000002`,
          `AddOutboxPayloadColumns_${first}_1763800000003`,
          `AddOutboxWaitingIndex_${first}_1763800000004`,
          `AddOutboxKeySequence_${first}_1763800000005`,
          `AddOutboxTenantColumn_${first}_1763800000006`,
          `AllowOutboxFallbackOutcome_${first}_1763800000007`,
          `AddOutboxDeliveryPartitions_${first}_1763800000008`,
          `AddOutboxClaimChecks_${first}_1763800000009`,
          `AddOutboxSubjectKeys_${first}_1763800000010`,
          `CreateOutboxTable_${second}_1763800000000`,
          `AddOutboxAttemptHistory_${second}_1763800000001`,
          `AddOutboxCleanerIndexes_${second}_1763800000002`,
          `AddOutboxPayloadColumns_${second}_1763800000003`,
          `AddOutboxWaitingIndex_${second}_1763800000004`,
          `AddOutboxKeySequence_${second}_1763800000005`,
          `AddOutboxTenantColumn_${second}_1763800000006`,
          `AllowOutboxFallbackOutcome_${second}_1763800000007`,
          `AddOutboxDeliveryPartitions_${second}_1763800000008`,
          `AddOutboxClaimChecks_${second}_1763800000009`,
          `AddOutboxSubjectKeys_${second}_1763800000010`,
        ].sort(),
      );
      await columnsOf20(ds, first);
      await columnsOf20(ds, second);
      await historyOf(ds, first);
      await historyOf(ds, second);
      expect(await bootOn(first)).toBeUndefined();
      await ds.query(`SELECT message_id FROM ${quoteTable(ds, inbox)} WHERE 1 = 0`);
    } finally {
      await dropOutboxTable(base, first);
      await dropOutboxTable(base, second);
      await base.query(`DROP TABLE IF EXISTS ${quoteTable(base, inbox)}`);
      await base.query(`DROP TABLE IF EXISTS ${quoteTable(base, `${inbox}_seq`)}`);
    }
  });

  it('creates the archive with createOutboxArchiveMigration(), and its down keeps it', async () => {
    const table = `${scratch}_ar`;
    const ds = await withMigrations([
      ...outboxMigrations({ tableName: table, with: OUTBOX_STEP_OPTIONS }),
      createOutboxArchiveMigration({ tableName: table }),
    ]);
    try {
      const ran = await ds.runMigrations();
      expect(ran.map((m) => m.name).at(-1)).toBe(`CreateOutboxArchive_${table}_1763800000100`);
      const archive = quoteTable(ds, `${table}_archive`);
      await ds.query(
        `SELECT archive_id, outbox_id, message_id, topic, message_key, event_type, payload, headers, status, attempts, last_error, last_attempt_at, created_at, delivered_at, dead_at, archived_at FROM ${archive} WHERE 1 = 0`,
      );
      await ds.undoLastMigration();
      await ds.query(`SELECT archive_id FROM ${archive} WHERE 1 = 0`);
    } finally {
      await dropOutboxTable(base, table);
    }
  });

  it('upgrades a 0.1 table as the README says: drop it, run the migrations again', async () => {
    const table = `${scratch}_up`;
    try {
      // Installed with 0.1: its migration is recorded, its table lacks the 0.2 columns.
      const v01 = await withMigrations([version01Migration(table)]);
      await v01.runMigrations();

      // This version's migration refuses to record itself over the old table, naming the fix.
      const current = await withMigrations(
        outboxMigrations({ tableName: table, with: OUTBOX_STEP_OPTIONS }),
      );
      const refused = await failureOf(current.runMigrations());
      expect(refused).toBeInstanceOf(OutboxTableMissingError);
      expect((refused as Error).message).toMatch(/drop it/);
      expect((refused as Error).message).toContain(`npx outbox schema migrate --table ${table}`);

      // The README's steps: (drain,) drop the table, run the migrations again.
      await dropOutboxTable(base, table);
      const ran = await current.runMigrations();
      expect(ran.map((m) => m.name)).toEqual([
        `CreateOutboxTable_${table}_1763800000000`,
        `AddOutboxAttemptHistory_${table}_1763800000001`,
        `AddOutboxCleanerIndexes_${table}_1763800000002`,
        `AddOutboxPayloadColumns_${table}_1763800000003`,
        `AddOutboxWaitingIndex_${table}_1763800000004`,
        `AddOutboxKeySequence_${table}_1763800000005`,
        `AddOutboxTenantColumn_${table}_1763800000006`,
        `AllowOutboxFallbackOutcome_${table}_1763800000007`,
        `AddOutboxDeliveryPartitions_${table}_1763800000008`,
        `AddOutboxClaimChecks_${table}_1763800000009`,
        `AddOutboxSubjectKeys_${table}_1763800000010`,
      ]);
      await columnsOf20(current, table);
      await historyOf(current, table);

      // …and the module starts on it.
      const app = await Test.createTestingModule({
        imports: [OutboxModule.forRoot({ dataSource: base, tableName: table, workers: false })],
      }).compile();
      await app.close();
    } finally {
      await dropOutboxTable(base, table);
    }
  });

  it('upgrades a table made by createOutboxMigration(): outboxMigrations() runs only the new steps', async () => {
    const table = `${scratch}_v03`;
    try {
      // Installed with 0.2: createOutboxMigration() ran and is recorded; no attempt history.
      const v03 = await withMigrations([createOutboxMigration({ tableName: table })]);
      expect((await v03.runMigrations()).map((m) => m.name)).toEqual([
        `CreateOutboxTable_${table}_1763800000000`,
      ]);
      // Not rejects.toThrow(): better-sqlite3 errors may come from another realm (see describe-error.ts).
      expect(await failureOf(historyOf(v03, table))).toBeDefined();
      const refused = await bootOn(table);
      expect(refused).toBeInstanceOf(OutboxTableMissingError);
      expect((refused as Error).message).toContain(
        `...outboxMigrations({ tableName: '${table}' })`,
      );

      // 0.2's step 1 made the table without the cleaner's indexes.
      const names = tableNamesFor(outboxDialectOf(db.name === 'mariadb' ? 'mysql' : db.name), {
        tableName: table,
      });
      const database = outboxDatabase(outboxDialectOf(base.options.type));
      const run = (sql: string, params?: unknown[]): Promise<unknown> => base.query(sql, params);
      await database.schema.cleanerIndexes.drop(run, names);
      expect(await cleanerIndexesOf(base, table)).toEqual([]);
      // Nor (on PostgreSQL, the one database that has it) the index of waiting messages.
      await database.schema.waitingIndex?.drop(run, names);
      expect(await waitingIndexOf(base, table)).toEqual([]);

      // The DataSource now lists outboxMigrations(): step 1 is known by name, only the later run.
      const current = await withMigrations(
        outboxMigrations({ tableName: table, with: OUTBOX_STEP_OPTIONS }),
      );
      expect((await current.runMigrations()).map((m) => m.name)).toEqual([
        `AddOutboxAttemptHistory_${table}_1763800000001`,
        `AddOutboxCleanerIndexes_${table}_1763800000002`,
        `AddOutboxPayloadColumns_${table}_1763800000003`,
        `AddOutboxWaitingIndex_${table}_1763800000004`,
        `AddOutboxKeySequence_${table}_1763800000005`,
        `AddOutboxTenantColumn_${table}_1763800000006`,
        `AllowOutboxFallbackOutcome_${table}_1763800000007`,
        `AddOutboxDeliveryPartitions_${table}_1763800000008`,
        `AddOutboxClaimChecks_${table}_1763800000009`,
        `AddOutboxSubjectKeys_${table}_1763800000010`,
      ]);
      await historyOf(current, table);
      expect(await cleanerIndexesOf(base, table)).toEqual(
        db.name === 'mariadb'
          ? [`${table}_done_idx`]
          : [`${table}_dead_idx`, `${table}_delivered_idx`],
      );
      expect(await waitingIndexOf(base, table)).toEqual(
        db.name === 'postgres' ? [`${table}_waiting_idx`] : [],
      );
      expect(await bootOn(table)).toBeUndefined();
      expect(await current.runMigrations()).toEqual([]);

      // Reverting step 11 drops the erasure's key and use tables;
      await current.undoLastMigration();
      expect(
        await failureOf(
          base.query(`SELECT 1 FROM ${quoteTable(base, `${table}_subject_keys`)} WHERE 1 = 0`),
        ),
      ).toBeDefined();
      // step 10 drops the claim-check table; step 9 the delivery partitions
      // (PostgreSQL; a no-op elsewhere); step 8 narrows the history's outcome check; step 7
      // drops the tenant column; step 6 the sequence counters and column; step 5 its index;
      // step 4 its columns; step 3 the indexes; step 2 the history, leaving the table.
      await current.undoLastMigration();
      expect(
        await failureOf(
          base.query(`SELECT 1 FROM ${quoteTable(base, `${table}_claim_checks`)} WHERE 1 = 0`),
        ),
      ).toBeDefined();
      await current.undoLastMigration();
      expect(
        await failureOf(
          base.query(`SELECT delivery_partition FROM ${quoteTable(base, table)} WHERE 1 = 0`),
        ),
      ).toBeDefined();
      await current.undoLastMigration();
      expect(await failureOf(insertAttempt(base, table, 'fallback'))).toBeDefined();
      await current.undoLastMigration();
      expect(
        await failureOf(base.query(`SELECT tenant_id FROM ${quoteTable(base, table)} WHERE 1 = 0`)),
      ).toBeDefined();
      await current.undoLastMigration();
      expect(
        await failureOf(base.query(`SELECT key_seq FROM ${quoteTable(base, table)} WHERE 1 = 0`)),
      ).toBeDefined();
      await current.undoLastMigration();
      expect(await waitingIndexOf(base, table)).toEqual([]);
      await current.undoLastMigration();
      expect(await failureOf(payloadColumnsOf(base, table))).toBeDefined();
      await current.undoLastMigration();
      expect(await cleanerIndexesOf(base, table)).toEqual([]);
      await historyOf(current, table);
      await current.undoLastMigration();
      expect(await failureOf(historyOf(current, table))).toBeDefined();
      await columnsOf20(current, table);
    } finally {
      await dropOutboxTable(base, table);
    }
  });

  it('takes a version-3 table holding rows of every status to version 4 in place', async () => {
    const table = `${scratch}_v3`;
    try {
      // A table as steps 1 to 3 of 0.3 made it before step 4 existed: the columns step 4 adds
      // are dropped from today's DDL, and the three steps are recorded as run.
      const v3 = await withMigrations(
        outboxMigrations({ tableName: table, with: OUTBOX_STEP_OPTIONS }).slice(0, 3),
      );
      expect(await v3.runMigrations()).toHaveLength(3);
      const dialect = outboxDialectOf(base.options.type);
      const names = tableNamesFor(dialect, { tableName: table });
      await outboxDatabase(dialect).schema.payloadColumns.drop(
        (sql, params) => base.query(sql, params),
        names,
      );
      expect(await failureOf(payloadColumnsOf(base, table))).toBeDefined();

      const q = quoteTable(base, table);
      const p = (i: number): string => (db.name === 'postgres' ? `$${i}` : '?');
      const statuses = ['pending', 'waiting', 'delivered', 'dead', 'pending'];
      const ids = statuses.map((_, i) => `0190d6b4-0000-7000-8000-00000000000${i}`);
      for (const [i, status] of statuses.entries()) {
        await base.query(
          `INSERT INTO ${q} (message_id, topic, message_key, event_type, payload, headers, status, attempts, locked_by, lock_token, locked_until)
VALUES (${[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11].map(p).join(', ')})`,
          [
            storedId(base.options.type, ids[i] ?? ''),
            'orders',
            'k1',
            'order.created',
            JSON.stringify({ n: i }),
            '{"x-tenant":"t1"}',
            status,
            status === 'pending' ? 0 : 3,
            // The last pending row is leased by a dispatcher that is still running.
            i === 4 ? 'old-dispatcher' : null,
            i === 4 ? '0190d6b4-0000-7000-8000-0000000000ff' : null,
            // As UTC text: every database (and SQLite's binding) takes it.
            i === 4
              ? new Date(Date.now() + 3_600_000).toISOString().replace('T', ' ').replace('Z', '')
              : null,
          ],
        );
      }
      const before = await base.query<Record<string, unknown>[]>(
        `SELECT message_id, status, attempts, payload, headers, locked_by FROM ${q} ORDER BY id`,
      );

      // This version refuses the table and names the command, rather than failing each claim.
      const refused = await bootOn(table);
      expect(refused).toBeInstanceOf(OutboxTableMissingError);
      expect((refused as Error).message).toContain(`npx outbox schema migrate --table ${table}`);
      expect((refused as Error).message).toContain('step 4');

      const current = await withMigrations(
        outboxMigrations({ tableName: table, with: OUTBOX_STEP_OPTIONS }),
      );
      expect((await current.runMigrations()).map((m) => m.name)).toEqual([
        `AddOutboxPayloadColumns_${table}_1763800000003`,
        `AddOutboxWaitingIndex_${table}_1763800000004`,
        `AddOutboxKeySequence_${table}_1763800000005`,
        `AddOutboxTenantColumn_${table}_1763800000006`,
        `AllowOutboxFallbackOutcome_${table}_1763800000007`,
        `AddOutboxDeliveryPartitions_${table}_1763800000008`,
        `AddOutboxClaimChecks_${table}_1763800000009`,
        `AddOutboxSubjectKeys_${table}_1763800000010`,
      ]);
      // Every row is still there as it was, now a JSON message with no attributes.
      const after = await base.query<Record<string, unknown>[]>(
        `SELECT message_id, status, attempts, payload, headers, locked_by, payload_encoding, content_type, payload_bytes, broker_attributes FROM ${q} ORDER BY id`,
      );
      expect(
        after.map(
          ({ payload_encoding, content_type, payload_bytes, broker_attributes, ...rest }) => {
            expect([payload_encoding, content_type, payload_bytes, broker_attributes]).toEqual([
              'json',
              null,
              null,
              null,
            ]);
            return rest;
          },
        ),
      ).toEqual(before);
      expect(await bootOn(table)).toBeUndefined();
      expect(await current.runMigrations()).toEqual([]);
    } finally {
      await dropOutboxTable(base, table);
    }
  });

  it("takes an attempt history holding rows to step 8 in place: the 'fallback' outcome is then taken", async () => {
    const table = `${scratch}_v7`;
    try {
      const current = await withMigrations(
        outboxMigrations({ tableName: table, with: OUTBOX_STEP_OPTIONS }),
      );
      expect(await current.runMigrations()).toHaveLength(OUTBOX_SCHEMA_STEPS.length);
      await insertAttempt(base, table, 'fallback');
      // Step 11's, 10's and 9's down migrations first (the erasure's tables, the claim-check
      // table, the delivery partitions), then step 8's, which deletes the rows the narrow check
      // would refuse, then narrows it.
      await current.undoLastMigration();
      await current.undoLastMigration();
      await current.undoLastMigration();
      await current.undoLastMigration();
      const h = quoteTable(base, `${table}_attempts`);
      expect(await base.query(`SELECT outcome FROM ${h}`)).toEqual([]);
      expect(await failureOf(insertAttempt(base, table, 'fallback'))).toBeDefined();
      for (const outcome of ['retry', 'dead', 'outage']) await insertAttempt(base, table, outcome);
      const before = await base.query<Record<string, unknown>[]>(
        `SELECT id, message_id, attempt, outcome, locked_by, error_class, error FROM ${h} ORDER BY id`,
      );
      expect(before.map((r) => r.outcome)).toEqual(['retry', 'dead', 'outage']);
      const status = await outboxSchemaStatus(sqlPortOf(base), {
        tableName: table,
        with: OUTBOX_STEP_OPTIONS,
      });
      expect(status).toMatchObject({ version: 7, latest: 11 });
      expect(status.parts[7]?.missing).toContain("refuses the 'fallback' outcome");

      expect((await current.runMigrations()).map((m) => m.name)).toEqual([
        `AllowOutboxFallbackOutcome_${table}_1763800000007`,
        `AddOutboxDeliveryPartitions_${table}_1763800000008`,
        `AddOutboxClaimChecks_${table}_1763800000009`,
        `AddOutboxSubjectKeys_${table}_1763800000010`,
      ]);
      // The rows are kept, ids included, and the history takes the new outcome.
      expect(
        await base.query(
          `SELECT id, message_id, attempt, outcome, locked_by, error_class, error FROM ${h} ORDER BY id`,
        ),
      ).toEqual(before);
      await insertAttempt(base, table, 'fallback');
      expect(await failureOf(insertAttempt(base, table, 'other'))).toBeDefined();
      expect(
        (await outboxSchemaStatus(sqlPortOf(base), { tableName: table, with: OUTBOX_STEP_OPTIONS }))
          .version,
      ).toBe(11);
    } finally {
      await dropOutboxTable(base, table);
    }
  });

  it('names the command that fixes a missing or old table in the boot error', async () => {
    const table = `${scratch}_old`;
    const boot = (tableName: string) =>
      failureOf(
        Test.createTestingModule({
          imports: [OutboxModule.forRoot({ dataSource: base, tableName, workers: false })],
        }).compile(),
      );
    try {
      const missing = await boot(`${scratch}_none`);
      expect(missing).toBeInstanceOf(OutboxTableMissingError);
      expect((missing as Error).message).toContain(
        `npx outbox schema migrate --table ${scratch}_none`,
      );

      const v01 = await withMigrations([version01Migration(table)]);
      await v01.runMigrations();
      const old = await boot(table);
      expect(old).toBeInstanceOf(OutboxTableMissingError);
      expect((old as Error).message).toContain(`npx outbox schema migrate --table ${table}`);
      expect((old as Error).message).toMatch(/0\.1.*drop it/s);
    } finally {
      await dropOutboxTable(base, table);
    }
  });
});
