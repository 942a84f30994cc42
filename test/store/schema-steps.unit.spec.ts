import { openSqliteFile } from '../connections/driver-targets';
import { betterSqlite3SqlPort } from '../../lib/drivers/better-sqlite3/better-sqlite3.sql-port';
import { createOutboxTable } from '../../lib/schema';
import { outboxSchemaStatus } from '../../lib/store/schema/schema-status';
import { outboxDatabase, tableNamesFor } from '../../lib/store/schema/outbox-table-ddl';
import { OUTBOX_SCHEMA_STEPS, OUTBOX_STEP_OPTIONS } from '../../lib/store/schema/schema-steps';
import { outboxMigrations } from '../../lib/typeorm/outbox-migrations';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import { OutboxTableMissingError } from '../../lib/errors/outbox-table-missing.error';
import { OutboxOptionsError } from '../../lib/errors/outbox-options.error';
import { OutboxMessages } from '../../lib/outbox.messages';

describe('the schema steps', () => {
  it('keep the names and order TypeORM has recorded in apps (a new step goes at the end)', () => {
    expect(OUTBOX_SCHEMA_STEPS.map((s) => [s.part, s.migration])).toEqual([
      ['table', 'CreateOutboxTable'],
      ['attempt-history', 'AddOutboxAttemptHistory'],
      ['cleaner-indexes', 'AddOutboxCleanerIndexes'],
      ['payload-columns', 'AddOutboxPayloadColumns'],
      ['waiting-index', 'AddOutboxWaitingIndex'],
      ['key-sequence', 'AddOutboxKeySequence'],
      ['tenant-column', 'AddOutboxTenantColumn'],
      ['fallback-outcome', 'AllowOutboxFallbackOutcome'],
      ['delivery-partitions', 'AddOutboxDeliveryPartitions'],
      ['claim-checks', 'AddOutboxClaimChecks'],
      ['subject-keys', 'AddOutboxSubjectKeys'],
    ]);
    expect(
      outboxMigrations({ tableName: 'orders_outbox', with: OUTBOX_STEP_OPTIONS }).map(
        (m) => new m().name,
      ),
    ).toEqual(
      OUTBOX_SCHEMA_STEPS.map((s, i) => `${s.migration}_orders_outbox_${1_763_800_000_000 + i}`),
    );
  });

  it('are what status reads: each step reverted lowers the version to the one before it, and createOutboxTable brings it back', async () => {
    const db = openSqliteFile(':memory:');
    const sql = betterSqlite3SqlPort(db);
    const database = outboxDatabase('sqlite');
    const context = {
      database,
      names: tableNamesFor('sqlite', {}),
      run: async (statement: string, params?: unknown[]) =>
        (await sql.query(statement, params)).rows,
      partitioning: null,
    };
    expect((await outboxSchemaStatus(sql, { with: OUTBOX_STEP_OPTIONS })).version).toBe(0);
    await createOutboxTable(sql, { with: OUTBOX_STEP_OPTIONS });
    const latest = OUTBOX_SCHEMA_STEPS.length;
    expect(await outboxSchemaStatus(sql, { with: OUTBOX_STEP_OPTIONS })).toMatchObject({
      version: latest,
      latest,
    });

    // Step 8 (the 'fallback' outcome) reverted: the table is at step 7 until it is made again.
    await OUTBOX_SCHEMA_STEPS[7]?.revert(context);
    expect((await outboxSchemaStatus(sql, { with: OUTBOX_STEP_OPTIONS })).version).toBe(7);
    await createOutboxTable(sql, { with: OUTBOX_STEP_OPTIONS });
    expect((await outboxSchemaStatus(sql, { with: OUTBOX_STEP_OPTIONS })).version).toBe(latest);
    // Step 7 (tenant ids) reverted: the table is at step 6 until it is made again.
    await OUTBOX_SCHEMA_STEPS[6]?.revert(context);
    expect((await outboxSchemaStatus(sql, { with: OUTBOX_STEP_OPTIONS })).version).toBe(6);
    await createOutboxTable(sql, { with: OUTBOX_STEP_OPTIONS });
    expect((await outboxSchemaStatus(sql, { with: OUTBOX_STEP_OPTIONS })).version).toBe(latest);
    // Step 6 (sequence numbers) reverted: the table is at step 5 until it is made again.
    await OUTBOX_SCHEMA_STEPS[5]?.revert(context);
    expect(await outboxSchemaStatus(sql, { with: OUTBOX_STEP_OPTIONS })).toMatchObject({
      version: 5,
    });
    await createOutboxTable(sql, { with: OUTBOX_STEP_OPTIONS });
    expect((await outboxSchemaStatus(sql, { with: OUTBOX_STEP_OPTIONS })).version).toBe(latest);

    // SQLite has no index of waiting messages (step 5): reverting it changes nothing.
    await OUTBOX_SCHEMA_STEPS[4]?.revert(context);
    expect((await outboxSchemaStatus(sql, { with: OUTBOX_STEP_OPTIONS })).version).toBe(latest);
    for (const index of [3, 2, 1]) {
      await OUTBOX_SCHEMA_STEPS[index]?.revert(context);
      const status = await outboxSchemaStatus(sql, { with: OUTBOX_STEP_OPTIONS });
      expect(status.version).toBe(index);
      expect(status.parts[index]).toMatchObject({ present: false, missing: expect.any(String) });
    }
    await createOutboxTable(sql, { with: OUTBOX_STEP_OPTIONS });
    expect((await outboxSchemaStatus(sql, { with: OUTBOX_STEP_OPTIONS })).version).toBe(latest);
    db.close();
  });

  it("drive bootstrap's checks: a step the options need fails the start naming it, one they do not need is not asked for", async () => {
    const db = openSqliteFile(':memory:');
    const sql = betterSqlite3SqlPort(db);
    const names = tableNamesFor('sqlite', {});
    await createOutboxTable(sql, { with: OUTBOX_STEP_OPTIONS });
    // Step 7 (tenant ids) and step 6 (sequence numbers) reverted: the table is at step 5.
    const context = {
      database: outboxDatabase('sqlite'),
      names,
      run: async (statement: string, params?: unknown[]) =>
        (await sql.query(statement, params)).rows,
      partitioning: null,
    };
    await OUTBOX_SCHEMA_STEPS[6]?.revert(context);
    await OUTBOX_SCHEMA_STEPS[5]?.revert(context);
    const open = (options: { sequence?: boolean; tenants?: object }) =>
      createOutboxStore(
        sql,
        {
          tableName: 'outbox',
          schema: null,
          ordering: { enabled: true, onDeadLetter: 'block', sequence: options.sequence },
          tenants: options.tenants,
        },
        { enabled: false, notify: false },
      );

    const plain = await open({});
    await plain.close();
    await expect(open({ tenants: {} })).rejects.toMatchObject({
      constructor: OutboxTableMissingError,
      missingStep: 7,
    });
    await expect(open({ sequence: true })).rejects.toMatchObject({
      constructor: OutboxTableMissingError,
      missingStep: 6,
    });
    // SQLite has no delivery partitions (step 9): refused before any probe, as unsupported.
    await createOutboxTable(sql, { with: OUTBOX_STEP_OPTIONS });
    const partitioned = createOutboxStore(
      sql,
      {
        tableName: 'outbox',
        schema: null,
        dispatcher: { dbTimeoutMs: 1_000, claims: 'partitions' },
      },
      { enabled: true, notify: false },
    );
    // An option this database cannot have: OutboxOptionsError on the option (docs/options.md),
    // naming the database, not the driver (better-sqlite3).
    await expect(partitioned).rejects.toBeInstanceOf(OutboxOptionsError);
    await expect(partitioned).rejects.toMatchObject({ option: 'dispatcher.claims' });
    await expect(partitioned).rejects.toThrow(/'partitions' is not available on SQLite in/);
    expect(OutboxMessages.partitionsUnsupported('`outbox`', 'mysql')).toContain(
      'not available on MySQL/MariaDB in this release',
    );
    await expect(partitioned).rejects.not.toBeInstanceOf(OutboxTableMissingError);
    db.close();
  });
});
