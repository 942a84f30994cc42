import type { DataSource } from 'typeorm';
import type { OutboxPublisher } from '../../lib';
import { uniqueTable, type TestDatabase } from './databases';
import { RecordingPublisher } from './recording.publisher';
import {
  dropOutboxTable,
  freshOutboxTable,
  instance,
  mergeOutboxOptions,
  openOutbox,
  type HarnessOverrides,
  type Instance,
  type OpenOutboxSpec,
  type OutboxApp,
} from './outbox-harness';

// The life of the outbox modules of one describe block on one test database: the DataSource
// is opened once for the block, and everything a test opens (modules, tables, consumers) is
// closed after it, last opened first.

export interface OutboxScope {
  /** The block's DataSource (set once `beforeAll` has run). */
  readonly ds: DataSource;
  /** The outbox table `db.open` made with the DataSource; tests may share it. */
  readonly baseTable: string;
  /**
   * Opens a module as `openOutbox` does, over the block's defaults, on the block's DataSource or
   * on `dataSource`; closed after the test.
   */
  open<P extends OutboxPublisher = RecordingPublisher>(
    spec?: OpenOutboxSpec<P>,
    dataSource?: DataSource,
  ): Promise<OutboxApp<P>>;
  /** As `open`, for the whole block (call it in `beforeAll`): closed after the block. */
  openShared<P extends OutboxPublisher = RecordingPublisher>(
    spec?: OpenOutboxSpec<P>,
  ): Promise<OutboxApp<P>>;
  /** An instance of an app on `table` (see `instance`), closed after the test. */
  instance(table: string, instanceId: string, overrides?: HarnessOverrides): Promise<Instance>;
  /** A fresh outbox table, dropped after the test (for several modules on one table). */
  table(prefix?: string): Promise<string>;
  /**
   * Runs `cleanup` after the test (or after the block, for what a test leaves to the tests
   * after it), before what was opened earlier.
   */
  defer(cleanup: () => Promise<unknown>, until?: 'test' | 'block'): void;
}

/**
 * Registers the hooks of a describe block that opens outbox modules on `db`: its DataSource
 * before the block, the cleanups after each test (all of them run; the first failure is
 * rethrown), the DataSource closed after the block. `defaults` apply to every `open()`.
 */
export function useOutboxScope(
  db: TestDatabase,
  defaults: Omit<OpenOutboxSpec, 'table' | 'publisher'> = {},
): OutboxScope {
  const baseTable = uniqueTable(`${defaults.tablePrefix ?? 'outbox_t'}_base`);
  let ds: DataSource | undefined;
  const cleanups: (() => Promise<unknown>)[] = [];
  const sharedCleanups: (() => Promise<unknown>)[] = [];

  beforeAll(async () => {
    ds = await db.open(baseTable);
  });

  afterEach(() => runAll(cleanups));

  afterAll(async () => {
    await runAll(sharedCleanups);
    if (ds !== undefined) await db.close(ds, baseTable);
  });

  const opened = (): DataSource => {
    if (ds === undefined) throw new Error(`the ${db.name} DataSource is not open yet`);
    return ds;
  };

  const openIn = async <P extends OutboxPublisher>(
    list: (() => Promise<unknown>)[],
    spec: OpenOutboxSpec<P>,
    dataSource: DataSource,
  ): Promise<OutboxApp<P>> => {
    // The scope, not the app, owns a fresh table: a test may read it after closing the app.
    let table = spec.table;
    if (table === undefined) {
      const fresh = await freshOutboxTable(dataSource, spec.tablePrefix ?? defaults.tablePrefix);
      list.push(() => dropOutboxTable(dataSource, fresh));
      table = fresh;
    }
    const app = await openOutbox<P>(dataSource, {
      ...defaults,
      ...spec,
      table,
      options: mergeOutboxOptions(defaults.options ?? {}, spec.options ?? {}),
    });
    list.push(() => app.close());
    return app;
  };

  return {
    get ds() {
      return opened();
    },
    baseTable,
    open: (spec = {}, dataSource) => openIn(cleanups, spec, dataSource ?? opened()),
    openShared: (spec = {}) => openIn(sharedCleanups, spec, opened()),
    async instance(table, instanceId, overrides) {
      const app = await instance(
        opened(),
        table,
        instanceId,
        mergeOutboxOptions(defaults.options ?? {}, overrides ?? {}),
      );
      cleanups.push(() => app.close());
      return app;
    },
    async table(prefix) {
      const table = await freshOutboxTable(opened(), prefix ?? defaults.tablePrefix);
      cleanups.push(() => dropOutboxTable(opened(), table));
      return table;
    },
    defer(cleanup, until = 'test') {
      (until === 'block' ? sharedCleanups : cleanups).push(cleanup);
    },
  };
}

/** Runs every cleanup, last registered first; rethrows the first failure once all have run. */
async function runAll(list: (() => Promise<unknown>)[]): Promise<void> {
  const failures: unknown[] = [];
  for (const cleanup of list.splice(0).reverse())
    await cleanup().catch((error: unknown) => failures.push(error));
  if (failures.length > 0) throw failures[0];
}
