import { randomBytes, randomUUID } from 'node:crypto';
import { DataSource, type MigrationInterface } from 'typeorm';
import { OutboxTableMissingError } from '../../lib';
import { tableClaimCheckStore } from '../../lib/claim-check';
import {
  outboxMigrations,
  dropOutboxTables,
  ensureOutboxTable,
  type OutboxStepOption,
} from '../../lib/schema';
import { outboxSchemaStatus } from '../../lib/store/schema/schema-status';
import {
  OUTBOX_SCHEMA_STEPS,
  schemaStepOf,
  type OutboxSchemaStep,
} from '../../lib/store/schema/schema-steps';
import { RecordingPublisher } from '../../lib/testing';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { TEST_DATABASES, testDatabase, uniqueTable } from '../support/databases';
import { openOutbox } from '../support/outbox-harness';
import { describeWith } from '../support/services';

// The steps that exist for one option (6 ordering.sequence, 7 tenants, 9 partitions, 10
// claimCheck) run only for a table made `with` that option: an app that does not use one never
// pays for it (PostgreSQL's 7 and 9 rewrite the table). On PostgreSQL, `online` makes 7 and 9
// without blocking writes: an insert made while the step runs commits, and gets its values.

const OPTIONAL = ['key-sequence', 'tenant-column', 'delivery-partitions', 'claim-checks'];

describe.each(TEST_DATABASES)('schema steps of one option on $name', (db) => {
  let base: DataSource;
  let holder: string;
  let table: string;
  const opened: DataSource[] = [];

  beforeEach(async () => {
    holder = uniqueTable('outbox_opt_base');
    base = await db.open(holder);
    table = uniqueTable('outbox_opt');
  });

  afterEach(async () => {
    for (const ds of opened.splice(0)) await ds.destroy();
    await base.query(`DROP TABLE IF EXISTS ${quoted(`${table}_migrations`)}`);
    await dropOutboxTables(base, { tableName: table });
    await db.close(base, holder);
  });

  const quoted = (name: string): string =>
    base.options.type === 'postgres' || base.options.type === 'better-sqlite3'
      ? `"${name}"`
      : `\`${name}\``;

  async function migrationsOf(migrations: (new () => MigrationInterface)[]): Promise<DataSource> {
    const ds = new DataSource({
      ...base.options,
      entities: [],
      synchronize: false,
      migrations,
      migrationsTableName: `${table}_migrations`,
    });
    await ds.initialize();
    opened.push(ds);
    return ds;
  }

  const presentParts = async (): Promise<string[]> =>
    (await outboxSchemaStatus(typeormSqlPort(base), { tableName: table })).parts
      .filter((p) => p.present)
      .map((p) => p.part);

  it('outboxMigrations() without `with` leaves out every optional step, and the table is up to date', async () => {
    const ds = await migrationsOf(outboxMigrations({ tableName: table }));
    const ran = (await ds.runMigrations()).map((m) => m.name.replace(/_.*$/, ''));
    const everyOther = OUTBOX_SCHEMA_STEPS.filter((s) => s.forOption === undefined).map(
      (s) => s.migration,
    );
    expect(ran).toEqual(everyOther);
    const status = await outboxSchemaStatus(typeormSqlPort(base), { tableName: table });
    expect(status.version).toBe(status.latest);
    // Step 8 and 9 on a database without them answer present (nothing to make there).
    const made = status.parts.filter((p) => OPTIONAL.includes(p.part) && p.present);
    for (const part of made) {
      expect(db.name === 'postgres' ? [] : ['delivery-partitions']).toContain(part.part);
    }
    expect(status.parts.find((p) => p.part === 'tenant-column')).toMatchObject({
      present: false,
      needed: false,
      forOption: 'tenants',
    });
    // Asked for tenants, the same table is one step short, which a migration with it adds.
    const asked = await outboxSchemaStatus(typeormSqlPort(base), {
      tableName: table,
      with: ['tenants'],
    });
    expect(asked.version).toBe(schemaStepOf('tenant-column') - 1);
    const withTenants = await migrationsOf(
      outboxMigrations({ tableName: table, with: ['tenants'] }),
    );
    expect((await withTenants.runMigrations()).map((m) => m.name)).toEqual([
      `AddOutboxTenantColumn_${table}_${1_763_800_000_000 + schemaStepOf('tenant-column') - 1}`,
    ]);
    expect(await presentParts()).toContain('tenant-column');
    expect(await presentParts()).not.toContain('claim-checks');
  });

  it('ensureOutboxTable() makes an optional step only `with` its option', async () => {
    await ensureOutboxTable(base, { tableName: table });
    expect(await presentParts()).not.toContain('tenant-column');
    expect(await presentParts()).not.toContain('key-sequence');
    await ensureOutboxTable(base, { tableName: table, with: ['sequence', 'claimCheck'] });
    expect(await presentParts()).toEqual(expect.arrayContaining(['key-sequence', 'claim-checks']));
    expect(await presentParts()).not.toContain('tenant-column');
  });

  it('refuses an option without a step of its own, naming those that have one', async () => {
    await expect(
      ensureOutboxTable(base, { tableName: table, with: ['tenant' as 'tenants'] }),
    ).rejects.toThrow(
      /"tenant" is not an option with a schema step.*'sequence', 'tenants', 'partitions', 'claimCheck'/,
    );
  });
});

describeWith(['postgres'], 'online schema steps on PostgreSQL', () => {
  const postgres = testDatabase('postgres');
  let base: DataSource;
  let holder: string;
  let table: string;

  beforeEach(async () => {
    holder = uniqueTable('outbox_onl_base');
    base = await postgres.open(holder);
    table = uniqueTable('outbox_onl');
    await ensureOutboxTable(base, { tableName: table });
  });

  afterEach(async () => {
    await dropOutboxTables(base, { tableName: table });
    for (const tag of ['tenant', 'part']) {
      await base.query(`DROP FUNCTION IF EXISTS "${table}_${tag}_fill"()`);
    }
    await postgres.close(base, holder);
  });

  const insert = (tenant: string | null, key: string | null): Promise<unknown> =>
    base.query(
      `INSERT INTO "${table}" (message_id, topic, message_key, event_type, payload, headers)
       VALUES ($1, 'orders', $2, 'order.created', '{}', $3)`,
      [randomUUID(), key, JSON.stringify(tenant === null ? {} : { 'x-outbox-tenant': tenant })],
    );

  it('makes the tenants and partitions steps while inserts commit, every row filled', async () => {
    for (let i = 0; i < 7; i += 1) await insert(i % 2 === 0 ? `t${i}` : null, `k${i}`);
    const during: string[] = [];
    let previous = Infinity;
    await ensureOutboxTable(base, {
      tableName: table,
      with: ['tenants', 'partitions'],
      online: {
        batchRows: 3,
        // Between batches, the step is under way (the column is there, rows are still being
        // filled): an insert from another connection commits before the step goes on. One the
        // step blocked would wait for it, and the step waits here: the test would not end.
        afterBatch: async (done) => {
          // The first batch of each step (tenants, then partitions).
          const first = Number(done) < previous;
          previous = Number(done);
          if (!first) return;
          await insert('late', `late-${during.length}`);
          during.push(done);
        },
      },
    });
    expect(during).toHaveLength(2);
    const rows = await base.query<
      { tenant_id: string | null; expected_tenant: string | null; part: number; expected: number }[]
    >(`SELECT tenant_id, headers ->> 'x-outbox-tenant' AS expected_tenant, delivery_partition AS part,
         get_byte(decode(md5(coalesce(message_key, message_id::text)), 'hex'), 0) AS expected
       FROM "${table}" ORDER BY id`);
    expect(rows).toHaveLength(9);
    for (const row of rows) {
      expect(row.tenant_id).toBe(row.expected_tenant);
      expect(row.part).toBe(row.expected);
    }
    expect(rows.filter((r) => r.tenant_id === 'late')).toHaveLength(2);
    const status = await outboxSchemaStatus(typeormSqlPort(base), {
      tableName: table,
      with: ['tenants', 'partitions'],
    });
    expect(status.version).toBe(status.latest);
    // Rows written after the step keep their values: the trigger computes them.
    await insert('after', 'k-after');
    const [after] = await base.query<{ tenant_id: string; part: number | null }[]>(
      `SELECT tenant_id, delivery_partition AS part FROM "${table}" WHERE message_key = 'k-after'`,
    );
    expect(after).toMatchObject({ tenant_id: 'after' });
    expect(after?.part).not.toBeNull();
    // …and so are rows written where ordinary triggers do not fire (a logical replication
    // subscriber applying the table, a restore with triggers disabled): a row without its
    // partition would never be read by a partitions owner.
    await base.transaction(async (m) => {
      await m.query('SET LOCAL session_replication_role = replica');
      await m.query(
        `INSERT INTO "${table}" (message_id, topic, message_key, event_type, payload, headers)
         VALUES ($1, 'orders', 'k-replica', 'order.created', '{}', '{"x-outbox-tenant":"replica"}')`,
        [randomUUID()],
      );
    });
    const [replica] = await base.query<{ tenant_id: string | null; part: number | null }[]>(
      `SELECT tenant_id, delivery_partition AS part FROM "${table}" WHERE message_key = 'k-replica'`,
    );
    expect(replica).toMatchObject({ tenant_id: 'replica' });
    expect(replica?.part).not.toBeNull();
  });

  it("a partitions step made by an earlier 0.3 build (no owner-lock column) counts as missing: an app with claims 'partitions' is refused, and making the step again adds it", async () => {
    await ensureOutboxTable(base, { tableName: table, with: ['partitions'] });
    await base.query(`ALTER TABLE "${table}_dispatchers" DROP COLUMN lock_key`);
    const status = () =>
      outboxSchemaStatus(typeormSqlPort(base), { tableName: table, with: ['partitions'] });
    expect((await status()).version).toBeLessThan((await status()).latest);
    const refused: unknown = await openOutbox(base, {
      table,
      publisher: new RecordingPublisher(),
      options: { dispatcher: { claims: 'partitions', listen: false } },
    }).then(
      async (app) => {
        await app.close();
        return new Error('an app with partitions started on a table without lock_key');
      },
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(OutboxTableMissingError);
    await ensureOutboxTable(base, { tableName: table, with: ['partitions'] });
    expect((await status()).version).toBe((await status()).latest);
    const columns = await base.query<{ attname: string }[]>(
      `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'lock_key'`,
      [`"${table}_dispatchers"`],
    );
    expect(columns).toHaveLength(1);
  });

  it('without online, the steps are stored generated columns made in one statement', async () => {
    await insert('a', 'k1');
    await ensureOutboxTable(base, { tableName: table, with: ['tenants', 'partitions'] });
    const generated = await base.query<{ attname: string }[]>(
      `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attgenerated = 's' ORDER BY attname`,
      [`"${table}"`],
    );
    expect(generated.map((r) => r.attname)).toEqual(['delivery_partition', 'tenant_id']);
  });
});

describeWith(['mariadb'], 'the tenants step on MariaDB', () => {
  it('builds its index in place with writes allowed (LOCK=NONE: the server refuses otherwise)', async () => {
    const mariadb = testDatabase('mariadb');
    const holder = uniqueTable('outbox_opt_m');
    const base = await mariadb.open(holder);
    const table = uniqueTable('outbox_opt_m');
    const statements: string[] = [];
    try {
      await ensureOutboxTable(base, { tableName: table });
      const port = typeormSqlPort(base);
      const watched = {
        ...port,
        databaseType: port.databaseType,
        query: (sql: string, params?: readonly unknown[]) => {
          statements.push(sql);
          return port.query(sql, params);
        },
      } as typeof port;
      const { createOutboxTable } = await import('../../lib/store/schema/outbox-table-ddl');
      await createOutboxTable(watched, { tableName: table, with: ['tenants'] });
      const alters = statements.filter(
        (s) => s.startsWith('ALTER TABLE') && s.includes('_tenant_idx'),
      );
      expect(alters).toHaveLength(1);
      expect(alters[0]).toMatch(/ALGORITHM=INPLACE, LOCK=NONE$/);
      const status = await outboxSchemaStatus(port, { tableName: table, with: ['tenants'] });
      expect(status.version).toBe(status.latest);
    } finally {
      await dropOutboxTables(base, { tableName: table });
      await mariadb.close(base, holder);
    }
  });
});

// Issue 75, item 17: an app is started on a table its migrations made without `with` (every
// step but the options' ones). One whose options need none of those steps starts and delivers;
// one that sets an option whose step the table lacks refuses to start, naming the step and the
// command (and the migrations' option) that adds it.
describe.each(TEST_DATABASES.filter((d) => d.name !== 'sqlite'))(
  'an app on a table migrated without the optional steps ($name)',
  (db) => {
    let base: DataSource;
    let holder: string;
    let table: string;

    beforeAll(async () => {
      holder = uniqueTable('gaps75_boot_base');
      base = await db.open(holder);
      table = uniqueTable('gaps75_boot');
      const ds = new DataSource({
        ...base.options,
        entities: [],
        synchronize: false,
        migrations: outboxMigrations({ tableName: table }),
        migrationsTableName: `${table}_migrations`,
      });
      await ds.initialize();
      try {
        await ds.runMigrations();
      } finally {
        await ds.destroy();
      }
    });

    afterAll(async () => {
      const q = db.name === 'postgres' ? '"' : '`';
      await base.query(`DROP TABLE IF EXISTS ${q}${table}_migrations${q}`);
      await dropOutboxTables(base, { tableName: table });
      await db.close(base, holder);
    });

    it('starts an app whose options need none of them, which delivers', async () => {
      const status = await outboxSchemaStatus(typeormSqlPort(base), { tableName: table });
      expect(status.parts.filter((p) => p.forOption !== null && p.present)).toEqual(
        // MySQL/MariaDB have no step 9: nothing to make there, so it answers present.
        db.name === 'postgres' ? [] : [expect.objectContaining({ part: 'delivery-partitions' })],
      );
      const app = await openOutbox(base, {
        table,
        publisher: new RecordingPublisher(),
        options: { dispatcher: { listen: false, pollIntervalMs: 50 } },
      });
      try {
        const [id] = await app.enqueue({
          topic: 'orders',
          type: 'order.created',
          key: 'k1',
          payload: {},
        });
        await app.runUntilIdle();
        expect(app.publisher.messages.map((m) => m.messageId)).toEqual([id]);
        expect((await app.row(id as string)).status).toBe('delivered');
      } finally {
        await app.close();
      }
    });

    const options: [OutboxStepOption, OutboxSchemaStep['part'], Record<string, unknown>][] = [
      ['sequence', 'key-sequence', { ordering: { sequence: true } }],
      ['tenants', 'tenant-column', { tenants: {} }],
      ['partitions', 'delivery-partitions', { dispatcher: { claims: 'partitions' } }],
      ['claimCheck', 'claim-checks', { claimCheck: { store: tableClaimCheckStore() } }],
      ['erasure', 'subject-keys', { erasure: { masterKey: randomBytes(32).toString('base64') } }],
    ];
    it.each(options)(
      'refuses an app with %s, naming its step and the command that adds it',
      async (option, part, moduleOptions) => {
        const opening = openOutbox(base, {
          table,
          publisher: new RecordingPublisher(),
          options: { dispatcher: { listen: false, pollIntervalMs: 50 }, ...moduleOptions },
        });
        if (option === 'partitions' && db.name !== 'postgres') {
          // PostgreSQL's option only: refused as such, before any look at the table.
          await expect(opening).rejects.toMatchObject({ option: 'dispatcher.claims' });
          return;
        }
        const error: unknown = await opening.then(
          async (app) => {
            await app.close();
            return new Error(`an app with ${option} started on a table without step ${part}`);
          },
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(OutboxTableMissingError);
        expect(error).toMatchObject({ missingStep: schemaStepOf(part) });
        const message = (error as Error).message;
        expect(message).toContain(`schema step ${schemaStepOf(part)} adds`);
        expect(message).toContain(`npx outbox schema migrate --table ${table} --with ${option}`);
        expect(message).toContain(
          `...outboxMigrations({ tableName: '${table}', with: ['${option}'] })`,
        );
        // Nothing was made by the refused start: the table still lacks the step.
        const status = await outboxSchemaStatus(typeormSqlPort(base), {
          tableName: table,
          with: [option],
        });
        expect(status.parts.find((p) => p.part === part)).toMatchObject({ present: false });
      },
    );
  },
);
