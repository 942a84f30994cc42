import { Injectable } from '@nestjs/common';
import { AsyncLocalStorage } from 'node:async_hooks';
import type { DataSource } from 'typeorm';
import {
  OnOutboxMessage,
  OutboxAdminInputError,
  OutboxEvent,
  OutboxInvalidMessageError,
  type OutboxHandlerMessage,
  OUTBOX_HEADER_TENANT,
  type OutboxMessage,
  type OutboxRecord,
} from '../../lib';
import { quoteTable } from '../support/outbox-harness';
import { storedId } from '../support/databases';
import { dispatchApps, msg } from '../support/dispatch-fixtures';
import { useOutboxScope } from '../support/outbox-scope';
import { describeSource, POLL_RUN_DATABASES, SOURCE_CASES, useSource } from '../support/sources';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { openLocalApp } from '../local/local-app';
import { openConsoleApp } from '../support/console-app';
import { get } from '../support/console-http';
import { waitFor } from '../support/wait-for';
import { CLAIM_LOOP } from '../support/test-claims';

/** The app's tenant context, as nestjs-cls or any AsyncLocalStorage would hold it. */
const tenantContext = new AsyncLocalStorage<string>();

/** What each handler call saw: the message's tenant, and the tenant context it ran in. */
const handled: { tenant: string | undefined; context: string | undefined }[] = [];

@Injectable()
class TenantHandlers {
  @OnOutboxMessage({ topic: 'orders' })
  onOrder(message: OutboxHandlerMessage): void {
    handled.push({ tenant: message.tenant, context: tenantContext.getStore() });
  }
}

// Tenant ids (docs/tenants.md): captured at enqueue (explicitly, by the decorator, from the
// caller's context), stored in tenant_id and carried in x-outbox-tenant to the broker whichever
// source delivers; and tenant-fair claims, where one tenant's backlog does not hold up another
// tenant's message and every key keeps its order.

@OutboxEvent<InvoicePaid>({ topic: 'invoices', key: 'invoiceId', tenant: 'account' })
class InvoicePaid {
  constructor(
    readonly invoiceId: string,
    readonly account: string,
  ) {}
}

@OutboxEvent<InvoiceVoided>({ topic: 'invoices', tenant: (e) => `acct-${e.accountNo}` })
class InvoiceVoided {
  constructor(readonly accountNo: number) {}
}

/**
 * Holds each batch without tenant B's message open until B's message was published (or
 * `holdMs` passed), noting how many such batches were held when it was.
 */
class HoldingPublisher extends RecordingPublisher {
  held = 0;
  /** How many of A's batches were held open when B's message was published; -1: not yet. */
  heldWhenB = -1;
  /** Why each held batch was let go: B's message published, or the time limit. */
  readonly releasedBy: ('b' | 'timeout')[] = [];
  private releaseHeld: (() => void) | undefined;
  private readonly bPublished = new Promise<void>((resolve) => (this.releaseHeld = resolve));

  constructor(private readonly holdMs: number) {
    super();
  }

  override async publish(messages: readonly OutboxRecord[], signal: AbortSignal) {
    const isB = (m: OutboxRecord) => m.headers[OUTBOX_HEADER_TENANT] === 'B';
    if (messages.some(isB)) {
      if (this.heldWhenB < 0) this.heldWhenB = this.held;
      const outcomes = await super.publish(messages, signal);
      this.releaseHeld?.();
      return outcomes;
    }
    this.held++;
    let timer: NodeJS.Timeout | undefined;
    const why = await Promise.race([
      this.bPublished.then(() => 'b' as const),
      new Promise<'timeout'>(
        (resolve) => (timer = setTimeout(() => resolve('timeout'), this.holdMs)),
      ),
    ]);
    clearTimeout(timer);
    this.releasedBy.push(why);
    this.held--;
    return super.publish(messages, signal);
  }
}

/** The tenant_id column of each message, in the order of `ids`. */
async function tenantColumn(
  h: { table: string },
  ds: DataSource,
  ids: readonly string[],
): Promise<(string | null)[]> {
  const param = ds.options.type === 'postgres' ? '$1' : '?';
  const column: (string | null)[] = [];
  for (const id of ids) {
    const rows = await ds.query<{ t: string | null }[]>(
      `SELECT tenant_id AS t FROM ${quoteTable(ds, h.table)} WHERE message_id = ${param}`,
      [storedId(ds.options.type, id)],
    );
    column.push(rows[0]?.t ?? null);
  }
  return column;
}

for (const source of SOURCE_CASES) {
  describeSource(source, 'tenant ids', () => {
    const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_tn', options: CLAIM_LOOP });
    const src = useSource(scope, source);

    it('captures the tenant explicitly, by the decorator (property or function) and from the caller, and carries it in tenant_id and x-outbox-tenant', async () => {
      const publisher = new RecordingPublisher();
      let current: string | undefined = 'ambient-1';
      const h = await src.boot(publisher, { tenants: { resolve: () => current } });
      const [explicit, own] = await h.enqueue([
        msg('k1', { n: 1 }, { tenant: 'explicit-1' }),
        msg('k2', { n: 2 }),
      ]);
      const [byProperty, byFunction] = await scope.ds.transaction((m) =>
        h.outbox.enqueue([new InvoicePaid('inv-1', 'acct-A'), new InvoiceVoided(7)], m),
      );
      current = undefined;
      const [none] = await h.enqueue(msg('k3', { n: 3 }));
      const ids = [explicit, own, byProperty, byFunction, none] as string[];

      await src.deliver(h, 'all five', () => publisher.sentIds.length >= 5);
      const header = (id: string) =>
        publisher.sent.find((r) => r.messageId === id)?.headers[OUTBOX_HEADER_TENANT];
      expect(ids.map(header)).toEqual(['explicit-1', 'ambient-1', 'acct-A', 'acct-7', undefined]);
      expect(await tenantColumn(h, scope.ds, ids)).toEqual([
        'explicit-1',
        'ambient-1',
        'acct-A',
        'acct-7',
        null,
      ]);
    });
  });
}

for (const db of POLL_RUN_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `tenant ids on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_tn', options: CLAIM_LOOP });
    const apps = dispatchApps(scope);

    it('refuses a bad tenant, and any tenant with the tenants option off, writing nothing', async () => {
      const h = await apps.boot(new RecordingPublisher(), { tenants: {} });
      for (const tenant of ['', 'x'.repeat(129), 42, 'a\u0000b']) {
        const error = await h
          .enqueue([msg('k', {}), msg('k', {}, { tenant } as Partial<OutboxMessage>)])
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(OutboxInvalidMessageError);
        expect(error).toMatchObject({ reason: 'invalid-tenant', index: 1 });
      }
      const off = await apps.boot(new RecordingPublisher());
      const error = await off.enqueue(msg('k', {}, { tenant: 't1' })).catch((e: unknown) => e);
      expect(error).toMatchObject({ reason: 'invalid-tenant' });
      expect(String(error)).toMatch(/tenants option is off/);
      expect(await h.rows()).toEqual([]);
      expect(await off.rows()).toEqual([]);
    });

    // A backlog of twenty batches for tenant A, over 50 keys of 4 messages each (more keys than
    // a claim's window holds), then tenant B's one message: the fair claim takes B's message in
    // its first batch, the ordinary claim (the control) only after A's backlog.
    async function firstBatch(fair: boolean) {
      const publisher = new RecordingPublisher();
      const h = await apps.boot(publisher, {
        dispatcher: { batchSize: 10 },
        tenants: { fair },
      });
      const backlog: OutboxMessage[] = Array.from({ length: 200 }, (_, i) =>
        msg(`a${i % 50}`, { i }, { tenant: 'A' }),
      );
      const aIds = await h.enqueue(backlog);
      const [bId] = await h.enqueue(msg('b', { i: 0 }, { tenant: 'B' }));
      await h.dispatcher.runOnce();
      const first = [...publisher.sentIds];
      await h.runUntilIdle();
      return { publisher, first, aIds, bId: bId as string };
    }

    it("with tenants.fair, tenant B's message goes in the first batch despite A's backlog of twenty batches, and A's keys keep their order", async () => {
      const { publisher, first, aIds, bId } = await firstBatch(true);
      expect(first).toContain(bId);
      expect(first.length).toBeLessThanOrEqual(10);
      // Every message once, each of A's keys in enqueue order.
      expect([...publisher.sentIds].sort()).toEqual([...aIds, bId].sort());
      for (let k = 0; k < 50; k++) {
        expect(publisher.sentForKey(`a${k}`)).toEqual(aIds.filter((_, i) => i % 50 === k));
      }
    });

    it("without tenants.fair, tenant B's message waits behind A's backlog (the control)", async () => {
      const { first, bId } = await firstBatch(false);
      expect(first).not.toContain(bId);
    });

    // The quiet lane: both of the loop's slots (batchesInFlight 2) hold A's batches, which the
    // publisher keeps open until B's message is published; B commits meanwhile. Without the
    // lane B's message would wait for a slot, and the held batches for their time limit.
    it("with tenants.fair, tenant B's message is claimed and published while both slots hold A's batches, and every key keeps its order", async () => {
      const publisher = new HoldingPublisher(5_000);
      const h = await apps.boot(publisher, {
        dispatcher: { batchSize: 10, batchesInFlight: 2 },
        tenants: { fair: true },
      });
      const aIds = await h.enqueue(
        Array.from({ length: 60 }, (_, i) => msg(`a${i % 20}`, { i }, { tenant: 'A' })),
      );
      await h.dispatcher.start();
      await waitFor('both slots holding A', () => publisher.held === 2);
      // B's second message is on a key of A's in flight: it waits for A's messages of the key.
      const [bId, bSharedId] = await h.enqueue([
        msg('b', { i: 0 }, { tenant: 'B' }),
        msg('a0', { i: 60 }, { tenant: 'B' }),
      ]);
      await waitFor('every message', () => publisher.sentIds.length >= 62, { timeoutMs: 20_000 });
      expect(publisher.heldWhenB).toBe(2);
      expect(publisher.releasedBy.slice(0, 2)).toEqual(['b', 'b']);
      expect([...publisher.sentIds].sort()).toEqual([...aIds, bId, bSharedId].sort());
      expect(publisher.sentForKey('a0')).toEqual([
        ...aIds.filter((_, i) => i % 20 === 0),
        bSharedId,
      ]);
      for (let k = 1; k < 20; k++) {
        expect(publisher.sentForKey(`a${k}`)).toEqual(aIds.filter((_, i) => i % 20 === k));
      }
    });

    it('with weights, a batch is shared by weight between the tenants with due messages', async () => {
      const publisher = new RecordingPublisher();
      const h = await apps.boot(publisher, {
        ordering: { enabled: false },
        dispatcher: { batchSize: 12 },
        tenants: { fair: { weights: { gold: 3 } } },
      });
      await h.enqueue([
        ...Array.from({ length: 30 }, (_, i) => msg(null, { i }, { tenant: 'bronze' })),
        ...Array.from({ length: 30 }, (_, i) => msg(null, { i }, { tenant: 'gold' })),
      ]);
      await h.dispatcher.runOnce();
      const tenants = publisher.sent.map((r) => r.headers[OUTBOX_HEADER_TENANT]);
      expect(tenants.filter((t) => t === 'gold')).toHaveLength(9);
      expect(tenants.filter((t) => t === 'bronze')).toHaveLength(3);
    });

    it('fails the app start when the table lacks tenant_id and the tenants option is on, and not otherwise', async () => {
      const table = await scope.table('outbox_tn');
      await scope.ds
        .query(`ALTER TABLE ${quoteTable(scope.ds, table)} DROP COLUMN tenant_id`)
        .catch(async () => {
          // MySQL/MariaDB drop the index with its column; SQLite needs the index gone first.
          await scope.ds.query(`DROP INDEX ${quoteTable(scope.ds, `${table}_tenant_idx`)}`);
          await scope.ds.query(`ALTER TABLE ${quoteTable(scope.ds, table)} DROP COLUMN tenant_id`);
        });
      const plain = await scope.open({ table, options: { workers: false } });
      expect(await plain.enqueue(msg('k', {}))).toHaveLength(1);
      await expect(scope.open({ table, options: { workers: false, tenants: {} } })).rejects.toThrow(
        /tenant_id/,
      );
    });

    it('hands in-process handlers the tenant, and runs them in the tenantContext the app gives', async () => {
      handled.length = 0;
      const app = await openLocalApp(scope.ds, {
        handlers: [TenantHandlers],
        options: { tenants: {} },
        handlersOptions: {
          concurrency: 1,
          tenantContext: (tenant, run) => tenantContext.run(tenant, run),
        },
      });
      scope.defer(() => app.close());
      await app.commit([msg('k1', { n: 1 }, { tenant: 'acme' }), msg('k2', { n: 2 })]);
      await waitFor('both handled', async () => {
        await app.dispatcher.drain();
        return handled.length === 2;
      });
      expect(handled).toEqual([
        { tenant: 'acme', context: 'acme' },
        { tenant: undefined, context: undefined },
      ]);
    });

    it('lists and counts by tenant in the admin API, with the tenant on each listed message; refused with tenants off', async () => {
      const h = await apps.boot(new RecordingPublisher(), { tenants: {} });
      const [a1, a2] = await h.enqueue([
        msg('k', { n: 1 }, { topic: 'a', tenant: 'acme' }),
        msg('k', { n: 2 }, { topic: 'b', tenant: 'acme' }),
      ]);
      const [other] = await h.enqueue(msg('j', { n: 3 }, { tenant: 'globex' }));
      const [none] = await h.enqueue(msg('i', { n: 4 }));
      const listed = await h.admin.list({ tenant: 'acme' });
      expect(listed.items.map((m) => [m.messageId, m.tenant])).toEqual([
        [a1, 'acme'],
        [a2, 'acme'],
      ]);
      expect((await h.admin.list({ tenant: null })).items.map((m) => m.messageId)).toEqual([none]);
      expect((await h.admin.list()).items.map((m) => m.tenant)).toEqual([
        'acme',
        'acme',
        'globex',
        null,
      ]);
      const counts = await h.admin.counts({ tenant: 'globex' });
      expect(counts).toMatchObject({ pending: 1, byTopic: [{ topic: 'orders', pending: 1 }] });
      expect(other).toBeDefined();

      const off = await apps.boot(new RecordingPublisher());
      await expect(off.admin.list({ tenant: 'acme' })).rejects.toThrow(OutboxAdminInputError);
      expect((await off.admin.list()).items.every((m) => m.tenant === undefined)).toBe(true);
    });
  });
}

// The console's pages are the poll run's (the sources project runs the suites above again).
const CONSOLE_RUNS = POLL_RUN_DATABASES.some((db) => db.name === 'postgres');
if (CONSOLE_RUNS) {
  describeWith(['postgres'], 'tenant ids in the console on postgres', () => {
    it('filters messages by tenant and shows a Tenant column, only with the tenants option', async () => {
      const c = await openConsoleApp(new RecordingPublisher(), { tenants: {} });
      try {
        const [acme] = await c.enqueue([msg('k1', {}, { tenant: 'acme' })]);
        const [globex] = await c.enqueue([msg('k2', {}, { tenant: 'globex' })]);
        const page = await get(`${c.url}/messages?status=pending&tenant=acme`);
        expect(page.status).toBe(200);
        expect(page.body).toContain(acme);
        expect(page.body).not.toContain(globex);
        expect(page.body).toContain('<th>Tenant</th>');
        expect(page.body).toContain('<td>acme</td>');
        expect(page.body).toContain('name="tenant" value="acme"');
      } finally {
        await c.close();
      }
      const off = await openConsoleApp(new RecordingPublisher());
      try {
        const page = await get(`${off.url}/messages?status=pending`);
        expect(page.status).toBe(200);
        expect(page.body).not.toContain('Tenant');
      } finally {
        await off.close();
      }
    });
  });
}
