import type {
  DynamicModule,
  INestApplication,
  InjectionToken,
  LoggerService,
  LogLevel,
  ModuleMetadata,
  Provider,
  Type,
} from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import {
  OutboxAdmin,
  OutboxCleaner,
  OutboxDispatcher,
  OutboxModule,
  OutboxService,
  OutboxUnlocker,
  type OutboxBatchReport,
  type OutboxMessage,
  type OutboxModuleExtras,
  type OutboxModuleOptions,
  type OutboxPublisher,
} from '../../lib';
import { OUTBOX_STORE } from '../../lib/outbox.constants';
import type { OutboxStore } from '../../lib/store/ports/outbox-store.port';
import { dropOutboxTables, ensureOutboxTable } from '../../lib/typeorm/typeorm-tables';
import { readOutbox, TestOrder, uniqueTable, type OutboxRow } from './databases';
import { partitioningOf, testPartitioning } from './partitioned-tables';
import { dbNowMs, dueAtMs, dueInMs, leaseLeftMs, youngestDeliveredAgeMs } from './db-clock';
import { RecordingPublisher } from './recording.publisher';
import { CLAIMS } from './test-claims';
import { waitFor } from './wait-for';
import { OUTBOX_STEP_OPTIONS } from '../../lib/store/schema/schema-steps';

// The one way an integration spec opens the outbox module: on a table of a test database (a
// fresh one unless it names one), with a publisher or none (enqueue-only), the options it
// needs, and whatever else its app imports. Several modules on one table act as several
// instances of one app. Nothing here calls the store: specs that must drive it directly get it
// from `store`.

/** Module options a spec may set: everything but where the module runs, which the harness sets. */
export type HarnessOverrides = Omit<
  Partial<OutboxModuleOptions>,
  'dataSource' | 'publisher' | 'tableName'
> &
  OutboxModuleExtras;

export interface OpenOutboxSpec<P extends OutboxPublisher = OutboxPublisher> {
  /** A table that exists; without it the module gets a fresh table that `close()` drops. */
  readonly table?: string;
  /** Prefix of the fresh table's name. */
  readonly tablePrefix?: string;
  /** The broker; without one the module is enqueue-only (`workers: false` unless said). */
  readonly publisher?: P;
  /** Laid over the harness's own (`autoStart: false`); groups such as `dispatcher` merge. */
  readonly options?: HarnessOverrides;
  /**
   * Registers with `forRootAsync`: the factory's options (given `inject`ed providers, e.g. the
   * metrics of an imported module) are laid over `options`.
   */
  readonly factory?: {
    readonly inject: readonly InjectionToken[];
    readonly useFactory: (...deps: never[]) => HarnessOverrides;
  };
  /** Modules, providers and controllers of the app around the outbox (CLS, Terminus …). */
  readonly imports?: ModuleMetadata['imports'];
  readonly providers?: readonly Provider[];
  readonly controllers?: readonly Type[];
  readonly logger?: LoggerService | LogLevel[];
  /** Serves the app over HTTP on a free local port instead of a bare application context. */
  readonly http?: boolean;
}

export interface OutboxApp<P extends OutboxPublisher = OutboxPublisher> {
  readonly table: string;
  readonly moduleRef: TestingModule;
  /** The HTTP app and its base URL, when opened with `http`. */
  readonly http: { readonly app: INestApplication; readonly url: string } | undefined;
  readonly instanceId: string | undefined;
  readonly outbox: OutboxService;
  readonly admin: OutboxAdmin;
  /** The workers: only when the module has them (a publisher, `workers` not false). */
  readonly dispatcher: OutboxDispatcher;
  readonly cleaner: OutboxCleaner;
  readonly unlocker: OutboxUnlocker;
  /** The store the dispatcher uses (tests may claim through it, or wrap it to stall). */
  readonly store: OutboxStore;
  readonly publisher: P;
  /** Errors reported as outages, unless the spec gave an observer of its own. */
  readonly outages: unknown[];
  /** Every batch report, in order, unless the spec gave an observer of its own. */
  readonly reports: OutboxBatchReport[];
  rows(): Promise<OutboxRow[]>;
  row(messageId: string): Promise<OutboxRow>;
  /** Enqueues in one committed transaction; resolves to the message ids. */
  enqueue(messages: OutboxMessage | readonly OutboxMessage[]): Promise<string[]>;
  /** Like `enqueue`, with a business row written in the same transaction. */
  commit(messages: readonly OutboxMessage[]): Promise<string[]>;
  /** Runs batches until one claims nothing; resolves to their reports. */
  runUntilIdle(): Promise<OutboxBatchReport[]>;
  /** Milliseconds until the message is due, on the database clock. */
  dueInMs(messageId: string): Promise<number>;
  /** The database clock now, in ms since the epoch. */
  dbNowMs(): Promise<number>;
  /** When the message is next due, in ms since the epoch on the database clock. */
  dueAtMs(messageId: string): Promise<number>;
  /** Milliseconds until the last lease held by `owner` expires (negative once all have). */
  leaseLeftMs(owner: string): Promise<number>;
  /** Age of the most recently delivered row, on the database clock. */
  youngestDeliveredAgeMs(): Promise<number>;
  /** Closes the module (and so the publisher) once, and drops the table if it made it. */
  close(): Promise<void>;
}

/** Quotes a table name for the DataSource's dialect (test tables only: no user input). */
export function quoteTable(ds: DataSource, name: string): string {
  return ds.options.type === 'mariadb' || ds.options.type === 'mysql' ? `\`${name}\`` : `"${name}"`;
}

/** Drops an outbox table with every table named after it, as an app's tear-down does. */
export async function dropOutboxTable(ds: DataSource, table: string): Promise<void> {
  await dropOutboxTables(ds, { tableName: table });
}

/** Creates a fresh outbox table on `ds` and returns its name; the caller drops it. */
export async function freshOutboxTable(ds: DataSource, prefix = 'outbox_t'): Promise<string> {
  const table = uniqueTable(prefix);
  await ensureOutboxTable(ds, {
    tableName: table,
    ...testPartitioning(ds),
    with: OUTBOX_STEP_OPTIONS,
  });
  return table;
}

const GROUPS = ['ordering', 'dispatcher', 'retry', 'unlocker', 'cleaner'] as const;

/**
 * Lays option sets over each other; the option groups merge key by key, and an option given as
 * undefined leaves the one below it (Nest's module builder would take it over its default).
 */
export function mergeOutboxOptions(...layers: readonly HarnessOverrides[]): HarnessOverrides {
  const merged: Record<string, unknown> = {};
  for (const layer of layers) {
    for (const [key, value] of Object.entries(layer)) {
      if (value === undefined) continue;
      merged[key] = (GROUPS as readonly string[]).includes(key)
        ? { ...(merged[key] as object | undefined), ...(value as object) }
        : value;
    }
  }
  return merged;
}

function splitExtras(options: HarnessOverrides): {
  extras: OutboxModuleExtras;
  rest: Omit<HarnessOverrides, keyof OutboxModuleExtras>;
} {
  const { name, isGlobal, workers, ...rest } = options;
  return { extras: mergeOutboxOptions({ name, isGlobal, workers }), rest };
}

function outboxModule(
  ds: DataSource,
  table: string,
  publisher: OutboxPublisher | undefined,
  options: HarnessOverrides,
  factory: OpenOutboxSpec['factory'],
): DynamicModule {
  const where = { dataSource: ds, tableName: table, publisher };
  if (factory === undefined) return OutboxModule.forRoot({ ...options, ...where });
  const { extras, rest } = splitExtras(options);
  return OutboxModule.forRootAsync({
    ...extras,
    inject: [...factory.inject],
    useFactory: (...deps: unknown[]) => ({
      ...splitExtras(mergeOutboxOptions(rest, factory.useFactory(...(deps as never[])))).rest,
      ...where,
    }),
  });
}

/** Opens the outbox module on a table of `ds` as `spec` says. */
export async function openOutbox<P extends OutboxPublisher = RecordingPublisher>(
  ds: DataSource,
  spec: OpenOutboxSpec<P> = {},
): Promise<OutboxApp<P>> {
  const ownsTable = spec.table === undefined;
  const table = spec.table ?? (await freshOutboxTable(ds, spec.tablePrefix));
  const outages: unknown[] = [];
  const reports: OutboxBatchReport[] = [];
  // A partitioned table needs the option that says so (the module checks the layout).
  const partitioning = await partitioningOf(ds, table, spec.options?.schema);
  const options = mergeOutboxOptions(
    // The `leases` and `stream` projects (jest.config.js) give the dispatch suites their
    // mode; the others leave it to the module (the table's choice). With
    // OUTBOX_TEST_PUBLISH_WINDOW (npm run test:stream), as a stream of that window.
    CLAIMS === undefined
      ? {}
      : {
          dispatcher: {
            claims: CLAIMS,
            ...(process.env.OUTBOX_TEST_PUBLISH_WINDOW === undefined
              ? {}
              : { publishWindow: Number(process.env.OUTBOX_TEST_PUBLISH_WINDOW) }),
          },
        },
    {
      autoStart: false,
      partitioning,
      workers: spec.publisher === undefined ? false : undefined,
      observer: {
        onOutage: (error) => outages.push(error),
        onBatch: (report) => reports.push(report),
      },
    },
    spec.options ?? {},
  );
  const moduleRef = await Test.createTestingModule({
    imports: [
      ...(spec.imports ?? []),
      outboxModule(ds, table, spec.publisher, options, spec.factory),
    ],
    providers: [...(spec.providers ?? [])],
    controllers: [...(spec.controllers ?? [])],
  }).compile();
  let http: OutboxApp['http'];
  if (spec.http === true) {
    const app = moduleRef.createNestApplication({ logger: spec.logger ?? false });
    await app.listen(0, '127.0.0.1');
    http = { app, url: await app.getUrl() };
  } else {
    if (spec.logger !== undefined) moduleRef.useLogger(spec.logger);
    await moduleRef.init();
  }
  const outbox = moduleRef.get(OutboxService);
  let closed = false;
  const app: OutboxApp<P> = {
    table,
    moduleRef,
    http,
    instanceId: options.instanceId,
    outbox,
    get admin() {
      return moduleRef.get(OutboxAdmin);
    },
    get dispatcher() {
      return moduleRef.get(OutboxDispatcher);
    },
    get cleaner() {
      return moduleRef.get(OutboxCleaner);
    },
    get unlocker() {
      return moduleRef.get(OutboxUnlocker);
    },
    get store() {
      return moduleRef.get<OutboxStore>(OUTBOX_STORE);
    },
    get publisher(): P {
      if (spec.publisher === undefined)
        throw new Error('this outbox was opened without a publisher');
      return spec.publisher;
    },
    outages,
    reports,
    rows: () => readOutbox(ds, table),
    async row(messageId) {
      const found = (await readOutbox(ds, table)).find((r) => r.messageId === messageId);
      if (found === undefined) throw new Error(`no row for ${messageId}`);
      return found;
    },
    enqueue: (messages) =>
      ds.transaction((m) => outbox.enqueue(isList(messages) ? messages : [messages], m)),
    commit: (messages) =>
      ds.transaction(async (manager) => {
        await manager.save(TestOrder, { customer: 'outbox-harness' });
        return outbox.enqueue(messages, manager);
      }),
    async runUntilIdle() {
      const batches: OutboxBatchReport[] = [];
      for (let i = 0; i < 200; i++) {
        const report = await this.dispatcher.runOnce();
        batches.push(report);
        if (report.claimed === 0) return batches;
      }
      throw new Error('the dispatcher never ran out of work');
    },
    dueInMs: (messageId) => dueInMs(ds, table, messageId),
    dbNowMs: () => dbNowMs(ds),
    dueAtMs: (messageId) => dueAtMs(ds, table, messageId),
    leaseLeftMs: (owner) => leaseLeftMs(ds, table, owner),
    youngestDeliveredAgeMs: () => youngestDeliveredAgeMs(ds, table),
    async close() {
      if (closed) return;
      closed = true;
      if (http !== undefined) await http.app.close();
      else await moduleRef.close();
      if (ownsTable) await dropOutboxTable(ds, table);
    },
  };
  return app;
}

function isList(
  messages: OutboxMessage | readonly OutboxMessage[],
): messages is readonly OutboxMessage[] {
  return Array.isArray(messages);
}

// ---- Presets ------------------------------------------------------------------------------

/** What the publisher suites drive: the outbox around one publisher, the dispatcher by hand. */
export type OutboxHarness<P extends OutboxPublisher = OutboxPublisher> = OutboxApp<P>;

/**
 * Opens an outbox module on a fresh table of `ds` with `publisher`. The dispatcher polls every
 * 50 ms, pauses at most 1 s after an outage and does not LISTEN; `overrides` replace any of it.
 */
export function openOutboxHarness<P extends OutboxPublisher>(
  ds: DataSource,
  publisher: P,
  overrides: HarnessOverrides = {},
  tablePrefix = 'outbox_h',
): Promise<OutboxHarness<P>> {
  return openOutbox(ds, {
    publisher,
    tablePrefix,
    options: mergeOutboxOptions(
      { dispatcher: { pollIntervalMs: 50, maxOutagePauseMs: 1_000, listen: false } },
      overrides,
    ),
  });
}

/** One instance of an app on an existing `table`, with a recording publisher, driven by hand. */
export type Instance = OutboxApp<RecordingPublisher>;

/** Boots an instance named `instanceId` on `table` of `ds`; `autoStart` off, polls every 50 ms. */
export function instance(
  ds: DataSource,
  table: string,
  instanceId: string,
  overrides: HarnessOverrides = {},
): Promise<Instance> {
  return openOutbox(ds, {
    table,
    publisher: new RecordingPublisher(),
    options: mergeOutboxOptions(
      { instanceId, dispatcher: { pollIntervalMs: 50, listen: false } },
      overrides,
    ),
  });
}

/** Drains the dispatcher repeatedly until `done()` holds. */
export async function dispatchUntil(
  h: OutboxApp,
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
export const allSettled = (h: OutboxApp) => async (): Promise<boolean> =>
  (await h.rows()).every((r) => r.status !== 'pending');

/**
 * The dispatch suites' defaults: a batch of 50 every 50 ms, a 10 s lease, a 2 s shutdown, and
 * retries after 300 ms doubling, no jitter, dead after 5 attempts; only errors logged.
 */
export function dispatchTestApp<P extends OutboxPublisher>(
  publisher: P,
  overrides: HarnessOverrides = {},
): OpenOutboxSpec<P> {
  return {
    publisher,
    tablePrefix: 'outbox_d',
    logger: ['error', 'fatal'],
    options: mergeOutboxOptions(
      {
        instanceId: 'dispatch-test',
        dispatcher: {
          pollIntervalMs: 50,
          batchSize: 50,
          leaseMs: 10_000,
          shutdownTimeoutMs: 2_000,
        },
        retry: { maxAttempts: 5, initialDelayMs: 300, factor: 2, jitter: 0 },
      },
      overrides,
    ),
  };
}
