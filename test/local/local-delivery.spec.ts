import { Injectable } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import {
  OnOutboxMessage,
  OutboxHandlerBusyError,
  PermanentPublishError,
  PublisherUnavailableError,
  type OutboxHandlerMessage,
} from '../../lib';
import { ensureInboxTable, Inbox } from '../../lib/inbox';
import { TestOrder, testDatabase, uniqueTable, type TestDatabase } from '../support/databases';
import { quoteTable } from '../support/outbox-harness';
import { describeWith } from '../support/services';
import { expectNever, sleep, waitFor } from '../support/wait-for';
import { openLocalApp, type LocalApp, type LocalAppSpec } from './local-app';
import { CLAIM_LOOP } from '../support/test-claims';
import { mergeOutboxOptions } from '../support/outbox-harness';

// The in-process transport on real databases: OutboxModule → LocalPublisher → @OnOutboxMessage()
// handlers on providers of the same app. Every test asserts what the handlers received and what
// the outbox table says.

interface Call {
  readonly messageId: string;
  readonly key: string | null;
  readonly attempts: number;
  readonly ok: boolean;
}

const DATABASES: readonly TestDatabase[] = [testDatabase('postgres'), testDatabase('sqlite')];

for (const db of DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `in-process handlers (${db.name})`, () => {
    let ds: DataSource;
    const baseTable = uniqueTable('outbox_localb');
    const apps: LocalApp[] = [];

    beforeAll(async () => {
      ds = await db.open(baseTable);
    });
    afterEach(async () => {
      for (const app of apps.splice(0).reverse()) await app.close();
    });
    afterAll(async () => {
      if (ds !== undefined) await db.close(ds, baseTable);
    });

    async function open(spec: LocalAppSpec): Promise<LocalApp> {
      const app = await openLocalApp(ds, {
        ...spec,
        // The claim loop's handlers (deaf calls, leases outlived); test:local-rabbitmq and the
        // promise suites run handlers on the project's mode.
        options: mergeOutboxOptions(CLAIM_LOOP, spec.options ?? {}),
        // TypeORM runs every SQLite transaction on one connection: handlers that open
        // transactions must run one at a time there.
        handlersOptions: { concurrency: db.name === 'sqlite' ? 1 : 10, ...spec.handlersOptions },
      });
      apps.push(app);
      return app;
    }

    const drainUntil = (app: LocalApp, what: string, done: () => Promise<boolean> | boolean) =>
      waitFor(
        what,
        async () => {
          await app.dispatcher.drain();
          return done();
        },
        { timeoutMs: 20_000, intervalMs: 20 },
      );

    it('hands committed messages to the handler after their transaction committed; a rolled-back one never reaches it', async () => {
      const seen: { message: OutboxHandlerMessage<{ customer: string }>; committedRows: number }[] =
        [];
      @Injectable()
      class Orders {
        @OnOutboxMessage('orders')
        async on(message: OutboxHandlerMessage<{ customer: string }>): Promise<void> {
          // Read from outside the enqueuing transaction: its business row must be visible.
          const rows = await ds.query<unknown[]>(
            `SELECT id FROM ${quoteTable(ds, 'outbox_test_order')} WHERE customer = $1`.replace(
              '$1',
              db.name === 'postgres' ? '$1' : '?',
            ),
            [message.payload.customer],
          );
          seen.push({ message, committedRows: rows.length });
        }
      }
      // The real loop: autoStart, the commit nudge and the poll timer deliver without help.
      const app = await open({ handlers: [Orders], options: { autoStart: true } });
      const customers = ['c-1', 'c-2', 'c-3'].map((c) => `${c}-${db.name}-${process.pid}`);
      const ids: string[] = [];
      for (const customer of customers) {
        ids.push(
          ...(await ds.transaction(async (manager) => {
            await manager.save(TestOrder, { customer });
            return app.outbox.enqueue(
              [
                {
                  topic: 'orders',
                  key: customer,
                  type: 'order.created',
                  payload: { customer },
                  headers: { 'x-tenant': 't1' },
                },
              ],
              manager,
            );
          })),
        );
      }
      const ghost = `ghost-${db.name}-${process.pid}`;
      await expect(
        ds.transaction(async (manager) => {
          await manager.save(TestOrder, { customer: ghost });
          await app.outbox.enqueue(
            { topic: 'orders', type: 'order.created', payload: { customer: ghost } },
            manager,
          );
          throw new Error('rolled back');
        }),
      ).rejects.toThrow('rolled back');

      await waitFor('three deliveries', () => seen.length >= 3, { timeoutMs: 15_000 });
      await expectNever('the rolled-back message reaches a handler', () => seen.length > 3, 500);
      expect(seen.map((s) => s.message.messageId).sort()).toEqual([...ids].sort());
      expect(seen.every((s) => s.committedRows === 1)).toBe(true);
      const first = seen.find((s) => s.message.messageId === ids[0])?.message;
      expect(first).toMatchObject({
        topic: 'orders',
        key: customers[0],
        type: 'order.created',
        payload: { customer: customers[0] },
        attempts: 1,
      });
      expect(first?.headers['x-tenant']).toBe('t1');
      await waitFor('rows delivered', async () =>
        (await app.rows()).every((r) => r.status === 'delivered'),
      );
      const rows = await app.rows();
      expect(rows.map((r) => r.messageId).sort()).toEqual([...ids].sort());
    });

    it('retries a handler that throws with the backoff and dead-letters it after maxAttempts; PermanentPublishError is dead at once; other keys flow', async () => {
      const calls: Call[] = [];
      @Injectable()
      class Stock {
        @OnOutboxMessage('stock')
        on(message: OutboxHandlerMessage<{ kind: string }>): void {
          const ok = message.payload.kind === 'fine';
          calls.push({
            messageId: message.messageId,
            key: message.key,
            attempts: message.attempts,
            ok,
          });
          if (message.payload.kind === 'broken') throw new Error('inventory service down');
          if (message.payload.kind === 'invalid') throw new PermanentPublishError('unknown SKU');
        }
      }
      const app = await open({ handlers: [Stock], options: { retry: { maxAttempts: 3 } } });
      const [broken, invalid, fine] = await app.commit([
        { topic: 'stock', key: 'sku-1', type: 'stock.reserved', payload: { kind: 'broken' } },
        { topic: 'stock', key: 'sku-2', type: 'stock.reserved', payload: { kind: 'invalid' } },
        { topic: 'stock', key: 'sku-3', type: 'stock.reserved', payload: { kind: 'fine' } },
      ]);
      await drainUntil(
        app,
        'the broken message dead',
        async () => (await app.row(broken ?? '')).status === 'dead',
      );

      expect(calls.filter((c) => c.messageId === broken).map((c) => c.attempts)).toEqual([1, 2, 3]);
      expect(calls.filter((c) => c.messageId === invalid).map((c) => c.attempts)).toEqual([1]);
      expect(calls.filter((c) => c.messageId === fine).map((c) => c.attempts)).toEqual([1]);
      const brokenRow = await app.row(broken ?? '');
      expect(brokenRow).toMatchObject({ status: 'dead', attempts: 3 });
      expect(brokenRow.lastError).toContain('inventory service down');
      const invalidRow = await app.row(invalid ?? '');
      expect(invalidRow).toMatchObject({ status: 'dead', attempts: 1 });
      expect(invalidRow.lastError).toContain('unknown SKU');
      expect((await app.row(fine ?? '')).status).toBe('delivered');
    });

    it('keeps per-key order across handler failures: a failing head holds its key, later messages wait, other keys flow', async () => {
      const calls: Call[] = [];
      const failuresLeft = new Map<string, number>();
      @Injectable()
      class Ledger {
        @OnOutboxMessage('ledger')
        on(message: OutboxHandlerMessage<{ n: number }>): void {
          const left = failuresLeft.get(message.messageId) ?? 0;
          calls.push({
            messageId: message.messageId,
            key: message.key,
            attempts: message.attempts,
            ok: left === 0,
          });
          if (left > 0) {
            failuresLeft.set(message.messageId, left - 1);
            throw new Error(`ledger busy (${left} more)`);
          }
        }
      }
      const app = await open({ handlers: [Ledger] });
      // Three transactions for key acct-1, so their commit order is their order.
      const ids: string[] = [];
      for (let n = 1; n <= 3; n++) {
        ids.push(
          ...(await app.commit([
            { topic: 'ledger', key: 'acct-1', type: 'entry', payload: { n } },
          ])),
        );
      }
      const [other] = await app.commit([
        { topic: 'ledger', key: 'acct-2', type: 'entry', payload: { n: 9 } },
      ]);
      failuresLeft.set(ids[0] ?? '', 2);
      failuresLeft.set(ids[1] ?? '', 1);

      await drainUntil(app, 'every message delivered', async () =>
        (await app.rows()).every((r) => r.status === 'delivered'),
      );
      const ofKey = calls.filter((c) => c.key === 'acct-1');
      // One at a time, in order: m1 fails twice, then succeeds; only then m2 (fails once), then m3.
      expect(ofKey.map((c) => [ids.indexOf(c.messageId) + 1, c.attempts, c.ok])).toEqual([
        [1, 1, false],
        [1, 2, false],
        [1, 3, true],
        [2, 1, false],
        [2, 2, true],
        [3, 1, true],
      ]);
      // The other key was not held behind acct-1's failing head.
      const otherAt = calls.findIndex((c) => c.messageId === other);
      const headDoneAt = calls.findIndex((c) => c.messageId === ids[0] && c.ok);
      expect(otherAt).toBeGreaterThanOrEqual(0);
      expect(otherAt).toBeLessThan(headDoneAt);
    });

    it('dead-letters a message of a topic no handler takes, with the reason, and never counts it as delivered', async () => {
      const seen: string[] = [];
      @Injectable()
      class Orders {
        @OnOutboxMessage({ topic: 'orders', type: 'order.created' })
        on(message: OutboxHandlerMessage): void {
          seen.push(message.messageId);
        }
      }
      const app = await open({ handlers: [Orders] });
      const [nobody, wrongType, handled] = await app.commit([
        { topic: 'invoices', type: 'invoice.sent', payload: {} },
        { topic: 'orders', type: 'order.cancelled', payload: {} },
        { topic: 'orders', type: 'order.created', payload: {} },
      ]);
      await app.runUntilIdle();
      const nobodyRow = await app.row(nobody ?? '');
      expect(nobodyRow).toMatchObject({ status: 'dead', attempts: 1 });
      expect(nobodyRow.lastError).toContain('No @OnOutboxMessage() handler for topic "invoices"');
      const wrongTypeRow = await app.row(wrongType ?? '');
      expect(wrongTypeRow.status).toBe('dead');
      expect(wrongTypeRow.lastError).toContain('type "order.cancelled" of topic "orders"');
      expect((await app.row(handled ?? '')).status).toBe('delivered');
      expect(seen).toEqual([handled]);
    });

    it("runs a handler's side effect once when the message is delivered again (inbox in the handler's transaction)", async () => {
      const inboxTable = uniqueTable('inbox_local');
      await ensureInboxTable(ds, { tableName: inboxTable });
      const inbox = new Inbox(ds, { tableName: inboxTable });
      let billingRuns = 0;
      let auditFailures = 1;
      @Injectable()
      class Billing {
        @OnOutboxMessage('orders')
        async on(message: OutboxHandlerMessage<{ orderId: string }>): Promise<void> {
          billingRuns += 1;
          await inbox.handleOnce(
            ds,
            { messageId: message.messageId, consumer: 'billing.order-created' },
            (manager) =>
              manager.save(TestOrder, { customer: `invoice-${message.payload.orderId}` }),
          );
        }
      }
      @Injectable()
      class Audit {
        // Fails the first delivery after Billing committed: the message comes again, as it would
        // after a crash between the handlers and the settle.
        @OnOutboxMessage('orders')
        async on(): Promise<void> {
          await sleep(20);
          if (auditFailures > 0) {
            auditFailures -= 1;
            throw new Error('audit log unavailable');
          }
        }
      }
      try {
        const app = await open({ handlers: [Billing, Audit] });
        const orderId = `o-${db.name}-${process.pid}-${Date.now()}`;
        const [id] = await app.commit([
          { topic: 'orders', key: orderId, type: 'order.created', payload: { orderId } },
        ]);
        await drainUntil(
          app,
          'the order delivered',
          async () => (await app.row(id ?? '')).status === 'delivered',
        );
        expect(billingRuns).toBe(2);
        expect((await app.row(id ?? '')).attempts).toBe(2);
        const invoices = await ds
          .getRepository(TestOrder)
          .countBy({ customer: `invoice-${orderId}` });
        expect(invoices).toBe(1);
        const marks = await ds.query<unknown[]>(
          `SELECT message_id FROM ${quoteTable(ds, inboxTable)}`,
        );
        expect(marks).toHaveLength(1);
      } finally {
        await ds.query(`DROP TABLE IF EXISTS ${quoteTable(ds, inboxTable)}`);
      }
    });

    it("never runs a key's message, or the same message again, while a handler call of that key outlives its publish timeout; both go out in order once it returns", async () => {
      const calls: { messageId: string; attempts: number; whileFirstRan: boolean }[] = [];
      let firstRunning = false;
      let releaseFirst: () => void = () => undefined;
      const firstReturns = new Promise<void>((resolve) => {
        releaseFirst = resolve;
      });
      @Injectable()
      class Ledger {
        @OnOutboxMessage('ledger')
        async on(message: OutboxHandlerMessage): Promise<void> {
          calls.push({
            messageId: message.messageId,
            attempts: message.attempts,
            whileFirstRan: firstRunning,
          });
          if (calls.length > 1) return;
          // The first call ignores its abort signal and runs long past publishTimeoutMs.
          firstRunning = true;
          await firstReturns;
          firstRunning = false;
        }
      }
      // A key held by a running call says nothing about the broker: no outage is begun for it.
      const outages: unknown[] = [];
      const app = await open({
        handlers: [Ledger],
        options: {
          dispatcher: { publishTimeoutMs: 300, maxOutagePauseMs: 200, pollIntervalMs: 200 },
          observer: { onOutage: (error) => outages.push(error) },
        },
      });
      const [m1] = await app.commit([{ topic: 'ledger', key: 'acct', type: 'entry', payload: {} }]);
      const [m2] = await app.commit([{ topic: 'ledger', key: 'acct', type: 'entry', payload: {} }]);

      await drainUntil(app, 'the first call to run', () => firstRunning);
      // The publish timed out (M1 keeps its attempt and is retried); keep the dispatcher going
      // while the first call still runs.
      await expectNever(
        'a second call while the first one runs',
        async () => {
          await app.dispatcher.drain();
          return calls.length > 1 ? calls : false;
        },
        2_000,
      );
      const held = await app.rows();
      // Only the call that ran counts an attempt: the claims held back while it ran gave theirs back.
      expect(held.find((r) => r.messageId === m1)?.attempts).toBe(1);
      expect(held.find((r) => r.messageId === m2)?.attempts).toBe(0);
      expect(held.every((r) => r.status !== 'delivered')).toBe(true);
      expect(outages.filter((e) => e instanceof OutboxHandlerBusyError)).toEqual([]);

      releaseFirst();
      await drainUntil(app, 'both delivered', async () =>
        (await app.rows()).every((r) => r.status === 'delivered'),
      );
      expect(calls).toEqual([
        { messageId: m1, attempts: 1, whileFirstRan: false },
        { messageId: m1, attempts: 2, whileFirstRan: false },
        { messageId: m2, attempts: 1, whileFirstRan: false },
      ]);
    });

    it('a dispatcher paused past its lease in a handler hands nothing more over; another delivers the rest, each message once', async () => {
      const calls: { by: string; messageId: string }[] = [];
      const leaseMs = 2_000;
      @Injectable()
      class Frozen {
        @OnOutboxMessage('ledger')
        on(message: OutboxHandlerMessage): void {
          calls.push({ by: 'frozen', messageId: message.messageId });
          // The whole process stalls in the first handler (SIGSTOP, a long GC): no timer fires
          // until the lease is over, and the handler then returns as if nothing happened.
          if (calls.length === 1) {
            Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, leaseMs + 300);
          }
        }
      }
      @Injectable()
      class Healthy {
        @OnOutboxMessage('ledger')
        on(message: OutboxHandlerMessage): void {
          calls.push({ by: 'healthy', messageId: message.messageId });
        }
      }
      // One handler call at a time, so the rest of the batch waits behind the frozen one.
      const frozen = await open({
        handlers: [Frozen],
        options: { dispatcher: { leaseMs } },
        handlersOptions: { concurrency: 1 },
      });
      const healthy = await open({ handlers: [Healthy], table: frozen.table });
      // a1 and b1 head their keys; a2 follows a1, in the batch's second round.
      const [a1] = await frozen.commit([{ topic: 'ledger', key: 'a', type: 'e', payload: {} }]);
      const [b1] = await frozen.commit([{ topic: 'ledger', key: 'b', type: 'e', payload: {} }]);
      const [a2] = await frozen.commit([{ topic: 'ledger', key: 'a', type: 'e', payload: {} }]);

      const report = await frozen.dispatcher.runOnce();
      expect(calls).toEqual([{ by: 'frozen', messageId: a1 }]);
      expect(report).toMatchObject({ claimed: 3, released: 2 });
      const rows = await frozen.rows();
      // Handed back unsent: due again, their attempts given back.
      for (const id of [b1, a2]) {
        expect(rows.find((r) => r.messageId === id)).toMatchObject({
          status: 'pending',
          attempts: 0,
        });
      }

      await drainUntil(healthy, 'every message delivered', async () =>
        (await healthy.rows()).every((r) => r.status === 'delivered'),
      );
      expect(calls.filter((c) => c.by === 'healthy').map((c) => c.messageId)).toEqual(
        expect.arrayContaining([b1, a2]),
      );
      // Each message handed over once.
      const ids = calls.map((c) => c.messageId);
      expect(ids.sort()).toEqual([a1, b1, a2].sort());
    });

    it('waits at shutdown for a handler that finishes within shutdownTimeoutMs', async () => {
      let started = false;
      let finished = false;
      @Injectable()
      class Slow {
        @OnOutboxMessage('slow')
        async on(): Promise<void> {
          started = true;
          await sleep(400);
          finished = true;
        }
      }
      const app = await open({
        handlers: [Slow],
        options: { dispatcher: { shutdownTimeoutMs: 5_000 } },
      });
      const [id] = await app.commit([{ topic: 'slow', type: 'slow', payload: {} }]);
      const draining = app.dispatcher.drain();
      await waitFor('the handler started', () => started);
      await app.stop();
      await draining;
      expect(finished).toBe(true);
      expect((await app.row(id ?? '')).status).toBe('delivered');
    });

    it('aborts a handler still running when shutdownTimeoutMs passes; its message, begun, counts an attempt and is retried', async () => {
      let started = false;
      let abortReason: unknown;
      @Injectable()
      class Hanging {
        @OnOutboxMessage('hang')
        on(message: OutboxHandlerMessage): Promise<void> {
          started = true;
          return new Promise((_, reject) => {
            message.signal.addEventListener('abort', () => {
              abortReason = message.signal.reason;
              reject(message.signal.reason as Error);
            });
          });
        }
      }
      const app = await open({
        handlers: [Hanging],
        options: { dispatcher: { shutdownTimeoutMs: 300 } },
      });
      const [id] = await app.commit([{ topic: 'hang', type: 'hang', payload: {} }]);
      const draining = app.dispatcher.drain();
      await waitFor('the handler started', () => started);
      const stopping = Date.now();
      await app.stop();
      await draining;
      expect(Date.now() - stopping).toBeLessThan(3_000);
      expect(abortReason).toBeInstanceOf(PublisherUnavailableError);
      // The handler had begun (it may have done part of its work): pending again, unleased, the
      // attempt counted as a timed-out one's, for the next instance to deliver after its backoff.
      expect(await app.row(id ?? '')).toMatchObject({
        status: 'pending',
        attempts: 1,
        lockedBy: null,
      });
    });
  });
}
