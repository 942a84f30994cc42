import type { LoggerService, Provider } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import {
  LocalPublisher,
  OutboxDispatcher,
  OutboxHandlersModule,
  OutboxModule,
  OutboxService,
  type OutboxBatchReport,
  type OutboxHandlersOptions,
  type OutboxMessage,
  type OutboxPublisher,
} from '../../lib';
import { readOutbox, TestOrder, type OutboxRow } from '../support/databases';
import {
  dropOutboxTable,
  freshOutboxTable,
  mergeOutboxOptions,
  type HarnessOverrides,
} from '../support/outbox-harness';

// An app of the in-process transport: OutboxHandlersModule beside an OutboxModule whose publisher
// is the LocalPublisher (or what `publisher` makes of it, e.g. a router), on a fresh outbox table.

export interface LocalAppSpec {
  /** The providers carrying @OnOutboxMessage() handlers. */
  readonly handlers: readonly Provider[];
  /** The outbox's publisher, made from the app's LocalPublisher. @default the LocalPublisher */
  readonly publisher?: (local: LocalPublisher) => OutboxPublisher;
  readonly options?: HarnessOverrides;
  readonly handlersOptions?: OutboxHandlersOptions;
  /** Another app's table, to run a second instance on it (left for that app to drop). */
  readonly table?: string;
  /** Receives the app's logs. @default errors only, to the console */
  readonly logger?: LoggerService;
}

export interface LocalApp {
  readonly table: string;
  readonly moduleRef: TestingModule;
  readonly outbox: OutboxService;
  readonly dispatcher: OutboxDispatcher;
  readonly local: LocalPublisher;
  rows(): Promise<OutboxRow[]>;
  row(messageId: string): Promise<OutboxRow>;
  /** Enqueues in a committed transaction that also writes a business row; resolves to the ids. */
  commit(messages: readonly OutboxMessage[]): Promise<string[]>;
  /** Runs batches until one claims nothing. */
  runUntilIdle(): Promise<OutboxBatchReport[]>;
  /** Closes the app (shutdown hooks run); the table stays for reading. */
  stop(): Promise<void>;
  /** Stops the app if still running and drops the table. */
  close(): Promise<void>;
}

export async function openLocalApp(ds: DataSource, spec: LocalAppSpec): Promise<LocalApp> {
  const table = spec.table ?? (await freshOutboxTable(ds, 'outbox_local'));
  const options = mergeOutboxOptions(
    {
      autoStart: false,
      instanceId: 'local-test',
      dispatcher: { pollIntervalMs: 50, leaseMs: 10_000, shutdownTimeoutMs: 2_000, listen: false },
      retry: { maxAttempts: 5, initialDelayMs: 20, factor: 1, jitter: 0 },
    },
    spec.options ?? {},
  );
  const { name: _name, isGlobal: _global, workers: _workers, ...rest } = options;
  const moduleRef = await Test.createTestingModule({
    imports: [
      OutboxHandlersModule.forRoot(spec.handlersOptions),
      OutboxModule.forRootAsync({
        inject: [LocalPublisher],
        useFactory: (local: LocalPublisher) => ({
          ...rest,
          dataSource: ds,
          tableName: table,
          publisher: spec.publisher === undefined ? local : spec.publisher(local),
        }),
      }),
    ],
    providers: [...spec.handlers],
  }).compile();
  moduleRef.useLogger(spec.logger ?? ['error', 'fatal']);
  await moduleRef.init();
  const outbox = moduleRef.get(OutboxService);
  let stopped: Promise<void> | undefined;
  let dropped = spec.table !== undefined;
  const app: LocalApp = {
    table,
    moduleRef,
    outbox,
    dispatcher: moduleRef.get(OutboxDispatcher),
    local: moduleRef.get(LocalPublisher),
    rows: () => readOutbox(ds, table),
    async row(messageId) {
      const found = (await readOutbox(ds, table)).find((r) => r.messageId === messageId);
      if (found === undefined) throw new Error(`no row for ${messageId}`);
      return found;
    },
    commit: (messages) =>
      ds.transaction(async (manager) => {
        await manager.save(TestOrder, { customer: 'local-app' });
        return outbox.enqueue(messages, manager);
      }),
    async runUntilIdle() {
      const batches: OutboxBatchReport[] = [];
      for (let i = 0; i < 200; i++) {
        const report = await app.dispatcher.runOnce();
        batches.push(report);
        if (report.claimed === 0) return batches;
      }
      throw new Error('the dispatcher never ran out of work');
    },
    stop() {
      stopped ??= moduleRef.close();
      return stopped;
    },
    async close() {
      await app.stop();
      if (dropped) return;
      dropped = true;
      await dropOutboxTable(ds, table);
    },
  };
  return app;
}
