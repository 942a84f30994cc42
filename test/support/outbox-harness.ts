import { Test, type TestingModule } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import {
  OutboxDispatcher,
  OutboxModule,
  OutboxService,
  type OutboxMessage,
  type OutboxModuleExtras,
  type OutboxModuleOptions,
  type OutboxPublisher,
} from '../../lib';
import { ensureOutboxTable } from '../../lib/orm/typeorm/typeorm-tables';
import { readOutbox, uniqueTable, type OutboxRow } from './databases';
import { waitFor } from './wait-for';

// The outbox module around one publisher, for the publisher suites: a table of its own, the
// dispatcher driven by hand (autoStart off), and the outages it reported.

export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, ms));

export interface OutboxHarness<P extends OutboxPublisher = OutboxPublisher> {
  readonly table: string;
  readonly outbox: OutboxService;
  readonly dispatcher: OutboxDispatcher;
  readonly publisher: P;
  /** Errors the dispatcher reported as outages (batch released, claims paused). */
  readonly outages: unknown[];
  rows(): Promise<OutboxRow[]>;
  /** Enqueues in one committed transaction; resolves to the message ids. */
  enqueue(messages: OutboxMessage | readonly OutboxMessage[]): Promise<string[]>;
  /** Closes the module (and so the publisher) and drops the table. */
  close(): Promise<void>;
}

export type HarnessOverrides = Omit<
  Partial<OutboxModuleOptions>,
  'dataSource' | 'publisher' | 'tableName'
> &
  OutboxModuleExtras;

/** Quotes a table name for the DataSource's dialect (test tables only: no user input). */
export function quoteTable(ds: DataSource, name: string): string {
  return ds.options.type === 'mariadb' || ds.options.type === 'mysql' ? `\`${name}\`` : `"${name}"`;
}

/** Drops an outbox table and, on MySQL/MariaDB, its key-lock table. */
export async function dropOutboxTable(ds: DataSource, table: string): Promise<void> {
  if (ds.options.type === 'mariadb' || ds.options.type === 'mysql')
    await ds.query(`DROP TABLE IF EXISTS ${quoteTable(ds, `${table}_key_lock`)}`);
  await ds.query(`DROP TABLE IF EXISTS ${quoteTable(ds, table)}`);
}

/**
 * Opens an outbox module on a fresh table of `ds` with `publisher`. The dispatcher polls every
 * 50 ms, pauses at most 1 s after an outage and does not LISTEN; `overrides` replace any of it.
 */
export async function openOutboxHarness<P extends OutboxPublisher>(
  ds: DataSource,
  publisher: P,
  overrides: HarnessOverrides = {},
  tablePrefix = 'outbox_h',
): Promise<OutboxHarness<P>> {
  const table = uniqueTable(tablePrefix);
  await ensureOutboxTable(ds, { tableName: table });
  const outages: unknown[] = [];
  const moduleRef: TestingModule = await Test.createTestingModule({
    imports: [
      OutboxModule.forRoot({
        dataSource: ds,
        tableName: table,
        publisher,
        autoStart: false,
        observer: { onOutage: (error) => outages.push(error) },
        ...overrides,
        dispatcher: {
          pollIntervalMs: 50,
          maxOutagePauseMs: 1_000,
          listen: false,
          ...overrides.dispatcher,
        },
      }),
    ],
  }).compile();
  await moduleRef.init();
  const outbox = moduleRef.get(OutboxService);
  return {
    table,
    outbox,
    dispatcher: moduleRef.get(OutboxDispatcher),
    publisher,
    outages,
    rows: () => readOutbox(ds, table),
    enqueue: (messages) =>
      ds.transaction((m) => outbox.enqueue(isList(messages) ? messages : [messages], m)),
    close: async () => {
      await moduleRef.close();
      await dropOutboxTable(ds, table);
    },
  };
}

function isList(
  messages: OutboxMessage | readonly OutboxMessage[],
): messages is readonly OutboxMessage[] {
  return Array.isArray(messages);
}

/** Drains the dispatcher repeatedly until `done()` holds. */
export async function dispatchUntil(
  h: OutboxHarness,
  what: string,
  done: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  await waitFor(
    what,
    async () => {
      await h.dispatcher.drain();
      return done();
    },
    { timeoutMs, intervalMs: 20 },
  );
}

/** True once no row is pending any more. */
export const allSettled = (h: OutboxHarness) => async (): Promise<boolean> =>
  (await h.rows()).every((r) => r.status !== 'pending');
