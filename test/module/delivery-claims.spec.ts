import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DataSource } from 'typeorm';
import { OutboxModule, OutboxOptionsError, type OutboxModuleOptions } from '../../lib';
import { dropOutboxTables, ensureOutboxTable } from '../../lib/schema';
import { RecordingPublisher } from '../../lib/testing';
import type { DeliveryPlan } from '../../lib/dispatch/delivery-source.provider';
import { decideClaims } from '../../lib/module/delivery-claims';
import { resolveOutboxOptions } from '../../lib/options/resolve-outbox-options';
import { OUTBOX_DELIVERY_PLAN } from '../../lib/outbox.constants';
import { OUTBOX_STEP_OPTIONS } from '../../lib/store/schema/schema-steps';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { TEST_DATABASES, uniqueTable } from '../support/databases';
import { CapturingLogger } from '../support/capturing-logger';
import { openOutbox } from '../support/outbox-harness';

// How dispatchers share a table when dispatcher.claims is left out: the table decides at
// bootstrap (decideClaims), partitions where it has them (PostgreSQL, schema step 9 whole) and
// no option needs row leases. A table without the step leases rows and says how to add it, so
// that an upgrade never fails on the default. The decision is asked for directly, and once
// through a booted app.

const publisher = new RecordingPublisher();

describe.each(TEST_DATABASES)('dispatcher.claims left out, on $name', (db) => {
  let ds: DataSource;
  let full: string;
  const made: string[] = [];

  beforeAll(async () => {
    full = uniqueTable('outbox_claims_full');
    ds = await db.open(full);
  });

  afterAll(async () => {
    for (const tableName of made.splice(0)) await dropOutboxTables(ds, { tableName });
    await dropOutboxTables(ds, { tableName: full });
    await db.close(ds, full);
  });

  async function tableWith(steps: typeof OUTBOX_STEP_OPTIONS): Promise<string> {
    const tableName = uniqueTable('outbox_claims');
    made.push(tableName);
    await ensureOutboxTable(ds, { tableName, with: steps });
    return tableName;
  }

  async function decide(
    tableName: string,
    options: Partial<OutboxModuleOptions> = {},
  ): Promise<{ claims: string; notices: string[] }> {
    const notices: string[] = [];
    const resolved = resolveOutboxOptions({ dataSource: ds, publisher, tableName, ...options });
    const claims = await decideClaims(
      resolved,
      typeormSqlPort(ds),
      { log: (message) => notices.push(message) },
      true,
    );
    return { claims, notices };
  }

  const postgres = db.name === 'postgres';

  it(`${postgres ? "'partitions'" : "'leases'"} for a table with every step, and nothing to say`, async () => {
    expect(await decide(full)).toEqual({
      claims: postgres ? 'partitions' : 'leases',
      notices: [],
    });
  });

  it(`a table without schema step 9: 'leases'${postgres ? ', and one notice that says how to add the step' : ', nothing to say (the database has no delivery partitions)'}`, async () => {
    const without = await tableWith(OUTBOX_STEP_OPTIONS.filter((s) => s !== 'partitions'));
    const { claims, notices } = await decide(without);
    expect(claims).toBe('leases');
    if (!postgres) {
      expect(notices).toEqual([]);
      return;
    }
    expect(notices).toHaveLength(1);
    expect(notices[0]).toContain(without);
    expect(notices[0]).toMatch(/schema migrate --table \S+ --with partitions/);
    expect(notices[0]).toMatch(/dispatcher\.claims: 'leases'/);
  });

  it(`a connection not open yet when the module starts: 'leases'${postgres ? ', and a notice that says how to choose' : ', nothing to say'}`, async () => {
    const notOpen = new DataSource(ds.options);
    const notices: string[] = [];
    const resolved = resolveOutboxOptions({ dataSource: notOpen, publisher, tableName: full });
    const claims = await decideClaims(
      resolved,
      typeormSqlPort(notOpen),
      { log: (message) => notices.push(message) },
      true,
    );
    expect(claims).toBe('leases');
    if (!postgres) {
      expect(notices).toEqual([]);
      return;
    }
    expect(notices).toHaveLength(1);
    expect(notices[0]).toContain(full);
    expect(notices[0]).toMatch(/not open when the module started/);
    expect(notices[0]).toMatch(/dispatcher\.claims: 'partitions'/);
  });

  it("tenants.fair and delivery 'external' keep 'leases'; a mode given is kept whatever the table", async () => {
    expect((await decide(full, { tenants: { fair: true } })).claims).toBe('leases');
    expect((await decide(full, { delivery: 'external', publisher: undefined })).claims).toBe(
      'leases',
    );
    expect((await decide(full, { dispatcher: { claims: 'leases' } })).claims).toBe('leases');
    // Given, it is kept: the store's bootstrap checks refuse a table that cannot have it.
    const without = await tableWith([]);
    expect(await decide(without, { dispatcher: { claims: 'partitions' } })).toEqual({
      claims: 'partitions',
      notices: [],
    });
  });

  it(`a booted app with dispatcher.claims left out: ${postgres ? "'partitions' on a table with step 9; 'leases' on one without, logged once at its start" : "'leases', with nothing logged"}`, async () => {
    // As an app's main.ts boots it: the logger is in place before the module decides.
    const bootedOn = async (tableName: string) => {
      const logger = new CapturingLogger();
      @Module({
        imports: [OutboxModule.forRoot({ dataSource: ds, tableName, publisher, autoStart: false })],
      })
      class AppModule {}
      const app = await NestFactory.createApplicationContext(AppModule, { logger });
      try {
        const { claims } = app.get<DeliveryPlan>(OUTBOX_DELIVERY_PLAN);
        return { claims, notices: logger.linesOf(/delivery partitions/, 'log', 'OutboxModule') };
      } finally {
        await app.close();
      }
    };
    const withStep = await bootedOn(full);
    expect(withStep.claims).toBe(postgres ? 'partitions' : 'leases');
    expect(withStep.notices).toEqual([]);
    const without = await tableWith(OUTBOX_STEP_OPTIONS.filter((s) => s !== 'partitions'));
    const withoutStep = await bootedOn(without);
    expect(withoutStep.claims).toBe('leases');
    expect(withoutStep.notices.map((n) => n.message)).toEqual(
      postgres ? [expect.stringContaining(`--with partitions`)] : [],
    );
  });

  it(`publishWindow with dispatcher.claims left out: ${postgres ? 'the module delivers by partitions, as a stream' : 'refused at bootstrap (no delivery partitions on this database), saying how to fix it'}`, async () => {
    const options = { dispatcher: { publishWindow: 8 } };
    if (!postgres) {
      const refused = await openOutbox(ds, { publisher: new RecordingPublisher(), options }).then(
        () => null,
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(OutboxOptionsError);
      expect((refused as OutboxOptionsError).option).toBe('dispatcher.claims');
      expect((refused as Error).message).toMatch(/not available on .*Leave dispatcher\.claims out/);
      return;
    }
    const recording = new RecordingPublisher();
    const app = await openOutbox(ds, { publisher: recording, options });
    try {
      expect(app.moduleRef.get<DeliveryPlan>(OUTBOX_DELIVERY_PLAN).claims).toBe('partitions');
      const ids = await app.enqueue(
        Array.from({ length: 5 }, (_, n) => ({ topic: 't', key: `k${n % 2}`, payload: { n } })),
      );
      await app.dispatcher.drain();
      expect([...recording.messageIds].sort()).toEqual([...ids].sort());
      const rows = await app.rows();
      expect(rows.every((r) => r.status === 'delivered' && r.lockedBy === null)).toBe(true);
    } finally {
      await app.close();
    }
  });
});
