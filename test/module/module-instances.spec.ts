import {
  Injectable,
  Module,
  type DynamicModule,
  type INestApplicationContext,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import type { DataSource } from 'typeorm';
import {
  getOutboxToken,
  InjectOutbox,
  InjectOutboxAdmin,
  OutboxAdmin,
  OutboxDispatcher,
  OutboxModule,
  OutboxOptionsError,
  OutboxService,
} from '../../lib';
import { ensureOutboxTable } from '../../lib/schema';
import { RecordingPublisher } from '../../lib/testing';
import { readOutbox, testDatabase, uniqueTable } from '../support/databases';
import { dropOutboxTable } from '../support/outbox-harness';
import { waitFor } from '../support/wait-for';

// Several OutboxModules in one app: each named instance has its own table, publisher,
// dispatcher and timers; two instances under one name are refused at bootstrap.

const postgres = testDatabase('postgres');

async function bootFailure(...imports: DynamicModule[]): Promise<unknown> {
  @Module({ imports })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, {
    logger: false,
    abortOnError: false,
  }).then(
    async (app: INestApplicationContext) => {
      await app.close();
      return undefined;
    },
    (error: unknown) => error,
  );
}

describe('several OutboxModules in one app', () => {
  let ds: DataSource;
  let first: string;
  let second: string;

  beforeEach(async () => {
    first = uniqueTable('outbox_inst');
    second = `${first}_b`;
    ds = await postgres.open(first);
    // Through the library, so the second table has all the first has (its attempt history too).
    await ensureOutboxTable(ds, { tableName: second });
  });

  afterEach(async () => {
    await dropOutboxTable(ds, second);
    await postgres.close(ds, first);
  });

  const quiet = { logger: ['error' as const] };
  const fast = { pollIntervalMs: 100, listen: false };

  @Injectable()
  class Writers {
    constructor(
      readonly orders: OutboxService,
      @InjectOutbox('audit') readonly audit: OutboxService,
      @InjectOutboxAdmin() readonly ordersAdmin: OutboxAdmin,
      @InjectOutboxAdmin('audit') readonly auditAdmin: OutboxAdmin,
    ) {}
  }

  async function bootTwo(
    orders: RecordingPublisher,
    audit: RecordingPublisher,
    async: boolean,
  ): Promise<INestApplicationContext> {
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        OutboxModule.forRoot({
          dataSource: ds,
          tableName: first,
          publisher: orders,
          dispatcher: fast,
        }),
        async
          ? OutboxModule.forRootAsync({
              name: 'audit',
              useFactory: () => ({
                dataSource: ds,
                tableName: second,
                publisher: audit,
                dispatcher: fast,
              }),
            })
          : OutboxModule.forRoot({
              name: 'audit',
              dataSource: ds,
              tableName: second,
              publisher: audit,
              dispatcher: fast,
            }),
      ],
      providers: [Writers],
    })
    class AppModule {}
    return NestFactory.createApplicationContext(AppModule, quiet);
  }

  it.each([
    ['forRoot', false],
    ['forRootAsync', true],
  ])(
    'runs a named instance (%s) beside the default one, each with its own table and publisher',
    async (_, async) => {
      const ordersPublisher = new RecordingPublisher();
      const auditPublisher = new RecordingPublisher();
      const app = await bootTwo(ordersPublisher, auditPublisher, async);
      try {
        const writers = app.get(Writers);
        expect(writers.audit).not.toBe(writers.orders);
        const [orderId, auditId] = await ds.transaction(async (manager) => [
          await writers.orders.enqueue({ topic: 'orders', payload: { n: 1 } }, manager),
          await writers.audit.enqueue({ topic: 'audit', payload: { n: 2 } }, manager),
        ]);
        await waitFor(
          'both messages to be published',
          () =>
            ordersPublisher.messageIds.includes(orderId) &&
            auditPublisher.messageIds.includes(auditId),
        );
        // Each through its own publisher, from its own table.
        expect(ordersPublisher.messageIds).toEqual([orderId]);
        expect(auditPublisher.messageIds).toEqual([auditId]);
        expect((await readOutbox(ds, first)).map((r) => r.messageId)).toEqual([orderId]);
        expect((await readOutbox(ds, second)).map((r) => r.messageId)).toEqual([auditId]);
        // Each admin reads its own table.
        await waitFor('both rows settled', async () => {
          const [a, b] = [
            await writers.ordersAdmin.get(orderId),
            await writers.auditAdmin.get(auditId),
          ];
          return a?.status === 'delivered' && b?.status === 'delivered';
        });
        expect(await writers.ordersAdmin.get(auditId)).toBeNull();
        expect(await writers.auditAdmin.get(orderId)).toBeNull();

        // Each dispatcher has its own timers, listed under its own names. The default instance's
        // table has schema step 9, so it delivers by partitions and runs no unlocker; the audit
        // table was made without the step, so its dispatcher leases rows.
        const timers = app
          .get(SchedulerRegistry)
          .getIntervals()
          .filter((n) => n.startsWith('nestjs-outbox:'));
        expect(timers.sort()).toEqual([
          'nestjs-outbox:audit:cleaner',
          'nestjs-outbox:audit:dispatcher',
          'nestjs-outbox:audit:unlocker',
          'nestjs-outbox:cleaner',
          'nestjs-outbox:dispatcher',
        ]);
        // Plain class lookups keep answering with the default instance.
        expect(app.get(OutboxService)).toBe(writers.orders);
        expect(app.get(getOutboxToken('audit'))).toBe(writers.audit);
        // Typed by the token: no app.get<OutboxDispatcher>() needed (strict TypeScript).
        const auditDispatcher = app.get(getOutboxToken('audit', OutboxDispatcher));
        expect(auditDispatcher).not.toBe(app.get(OutboxDispatcher));
        expect(auditDispatcher.status().started).toBe(true);
      } finally {
        await app.close();
      }
      expect(ordersPublisher.closed).toBe(true);
      expect(auditPublisher.closed).toBe(true);
    },
  );

  it('refuses two instances under one name', async () => {
    const failure = await bootFailure(
      OutboxModule.forRoot({ name: 'audit', dataSource: ds, tableName: first, workers: false }),
      OutboxModule.forRootAsync({
        name: 'audit',
        workers: false,
        useFactory: () => ({ dataSource: ds, tableName: second }),
      }),
    );
    expect(failure).toBeInstanceOf(OutboxOptionsError);
    expect((failure as Error).message).toMatch(/two OutboxModule instances named "audit"/i);
  });

  it('refuses an instance name that cannot be part of a token', () => {
    expect(() => OutboxModule.forRoot({ name: 'a b', dataSource: ds, workers: false })).toThrow(
      OutboxOptionsError,
    );
    expect(() =>
      OutboxModule.forRootAsync({
        name: '',
        workers: false,
        useFactory: () => ({ dataSource: ds }),
      }),
    ).toThrow(OutboxOptionsError);
  });

  it('refuses a name returned by the factory, where it comes too late to name the tokens', async () => {
    const failure = await bootFailure(
      OutboxModule.forRootAsync({
        workers: false,
        useFactory: () => ({ dataSource: ds, tableName: first, name: 'audit' }),
      }),
    );
    expect(failure).toBeInstanceOf(OutboxOptionsError);
    expect((failure as OutboxOptionsError).option).toBe('name');
  });

  it('refuses a second unnamed instance, saying how to name them', async () => {
    const failure = await bootFailure(
      OutboxModule.forRoot({ dataSource: ds, tableName: first, workers: false }),
      OutboxModule.forRoot({ dataSource: ds, tableName: second, workers: false }),
    );
    expect(failure).toBeInstanceOf(OutboxOptionsError);
    expect((failure as Error).message).toMatch(/two OutboxModule instances named "default"/i);
    expect((failure as Error).message).toContain('@InjectOutbox(');
  });
});
