import { randomBytes } from 'node:crypto';
import type { DataSource } from 'typeorm';
import type { OutboxPublisher } from '../../lib';
import { outboxTableNames } from '../../lib/internal/sql-identifier';
import {
  logTailing,
  mysqlLogTailingDdl,
  mysqlLogTailingDrop,
  postgresLogTailingDdl,
  type BinlogClientClass,
  type LogTailingOptions,
} from 'nestjs-outbox/log-tailing';
import { TEST_DATABASES, type TestDatabase } from './databases';
import {
  dispatchTestApp,
  dispatchUntil,
  mergeOutboxOptions,
  type HarnessOverrides,
  type OutboxApp,
} from './outbox-harness';
import type { OutboxScope } from './outbox-scope';
import { describeWith, describeWithPackages, type ServiceName } from './services';
import { CLAIMS_DEFAULT_BY_TABLE } from '../../lib/module/delivery-claims';
import { CLAIMS } from './test-claims';
import { waitFor } from './wait-for';

// Where the dispatcher learns of new messages: the table's poll (`delivery: 'poll'`,
// the default) or the database's log (`logTailing()`, docs/log-tailing.md). The dispatch suites
// that state a promise of delivery (every message once, per-key order, retries, dead letters,
// outages, shutdown, faults) run once per source through the public module options, so they
// hold whatever the log's internals are. A jest run sees one source: the poll in the default
// projects, the log in the `sources` project (`npm run test:sources`), whose setup file sets
// OUTBOX_TEST_SOURCE=log for its specs; SQLite has no log.

export type SourceName = 'poll' | 'log';

/**
 * Whether the dispatch suites on `db` deliver by partitions here: rows are never leased nor
 * parked there, which a few assertions read.
 */
export function partitionedOn(db: Pick<TestDatabase, 'name'>): boolean {
  if (CLAIMS !== undefined) return CLAIMS === 'partitions';
  return CLAIMS_DEFAULT_BY_TABLE && db.name === 'postgres';
}

/**
 * The `dispatcher.publishWindow` this project runs the partitioned suites with (`npm run
 * test:stream`), or undefined: slices of messages across batches instead of `batchesInFlight`
 * batches, which the assertions on concurrent calls read.
 */
export const PUBLISH_WINDOW =
  CLAIMS === 'partitions' && process.env.OUTBOX_TEST_PUBLISH_WINDOW !== undefined
    ? Number(process.env.OUTBOX_TEST_PUBLISH_WINDOW)
    : undefined;

/** One source on one database: what a source-parameterised suite runs once for. */
export interface SourceCase {
  readonly name: SourceName;
  readonly db: TestDatabase;
}

/** The source of this jest project: `log` in the `sources` project, else `poll`. */
export function selectedSource(): SourceName {
  const raw = process.env.OUTBOX_TEST_SOURCE?.trim() ?? '';
  if (raw === '' || raw === 'poll') return 'poll';
  if (raw === 'log') return 'log';
  throw new Error(`OUTBOX_TEST_SOURCE: unknown source ${raw} (use poll or log)`);
}

/**
 * The cases a source-parameterised suite runs: the poll on every selected database
 * (OUTBOX_TEST_DATABASES), or the log on the selected ones that have a log.
 */
export const SOURCE_CASES: readonly SourceCase[] = ((source) =>
  TEST_DATABASES.filter((db) => source === 'poll' || db.name !== 'sqlite').map((db) => ({
    name: source,
    db,
  })))(selectedSource());

/**
 * The databases of a spec's suites of the poll's own behaviour: every selected one in the poll's
 * run, none in the `sources`, `leases` and `stream` projects' (which run only the source-parameterised
 * suites).
 */
export const POLL_RUN_DATABASES: readonly TestDatabase[] =
  selectedSource() === 'poll' && CLAIMS === undefined ? TEST_DATABASES : [];

/** The cases on databases with a server (PostgreSQL, MariaDB), for suites SQLite cannot run. */
export const SERVER_SOURCE_CASES: readonly SourceCase[] = SOURCE_CASES.filter(
  (c) => c.db.name !== 'sqlite',
);

/** The reader each database's log source loads (an optional peer). */
const LOG_READER_PACKAGE = { postgres: 'pg-logical-replication', mariadb: '@vlasky/zongji' };

/**
 * `describe` for one case: the database's service, and for the log its reader's package; the
 * title names the database and the source (`delivery on postgres, log source`). `alsoNeeds`:
 * the other services the suite needs (a broker).
 */
export function describeSource(
  source: SourceCase,
  title: string,
  fn: () => void,
  alsoNeeds: readonly ServiceName[] = [],
): void {
  const { db } = source;
  const name = `${title} on ${db.name}, ${source.name} source`;
  const services = [...(db.service === null ? [] : [db.service]), ...alsoNeeds];
  if (source.name === 'poll' || db.name === 'sqlite') {
    describeWith(services, name, fn);
    return;
  }
  describeWithPackages(services, [LOG_READER_PACKAGE[db.name]], name, fn);
}

/** A sweep of the table so rare that only the log can have brought a new message out. */
const NO_SWEEP_MS = 3_600_000;

/** How the log source's dispatcher polls the table beside the log. */
export interface SourceSweep {
  /**
   * `off` (the default) where a test proves what the log delivered: the table is swept once an
   * hour, so only the log can have fed the dispatcher. A number where a test needs the table's
   * sweep (retries and outages come back through it); ignored by the poll source.
   */
  readonly sweepIntervalMs?: 'off' | number;
}

// zongji is an ES module: jest's module system cannot load it, so Node's own require loads it
// and the class is handed over, as `binlogClient` documents for such runners.
function loadZongJi(): BinlogClientClass {
  return (
    process.getBuiltinModule('node:module').createRequire(__filename)('@vlasky/zongji') as {
      default: BinlogClientClass;
    }
  ).default;
}

// Slots are per server and shared by every agent, run and CI job on it: a run tag keeps this
// run's names apart from any other's, so that cleanup only ever drops what this run made.
const RUN_TAG = randomBytes(3).toString('hex');
let slotCounter = 0;

/** A replication slot (and publication) name unique to this run and call. */
function uniqueLogName(): string {
  slotCounter += 1;
  return `outbox_src_${RUN_TAG}_${process.pid}_${slotCounter}`;
}

/** The source's side of a suite: module options, the log objects of a table, and a driver. */
export interface SourceApps {
  /**
   * Makes `table` readable by the source (PostgreSQL: a publication; MariaDB: the position
   * table) and returns the module options that observe it: nothing for the poll; for the log,
   * `logTailing()` with a slot of this run and `autoStart` (the reader runs only once started).
   * The log objects are dropped after the test, once the apps opened after this call closed.
   */
  prepare(table: string, sweep?: SourceSweep): Promise<HarnessOverrides>;
  /**
   * Resolves once the log's reader reads from a point that later commits come after (MariaDB:
   * it begins at the binlog's end and stores that position; PostgreSQL's slot is made when the
   * app starts). Nothing for the poll.
   */
  started(table: string): Promise<void>;
  /**
   * An app with the dispatch suites' defaults (dispatchTestApp) on a fresh table observed by
   * the source. The poll's dispatcher starts only if `overrides` say so (the test drives it);
   * the log's is started and its reader ready, so what the test commits next comes through it.
   */
  boot<P extends OutboxPublisher>(
    publisher: P,
    overrides?: HarnessOverrides,
    sweep?: SourceSweep,
  ): Promise<OutboxApp<P>>;
  /**
   * The same on an existing `table` (another instance of the app, or the app started again):
   * the table is prepared for the source at its first app, with that app's sweep.
   */
  dispatcherApp<P extends OutboxPublisher>(
    table: string,
    publisher: P,
    overrides?: HarnessOverrides,
  ): Promise<OutboxApp<P>>;
  /**
   * Until `done()` holds: the poll's dispatcher drained again and again (the test drives it),
   * the log's left to run on its own.
   */
  deliver(
    h: OutboxApp,
    what: string,
    done: () => boolean | Promise<boolean>,
    timeoutMs?: number,
  ): Promise<void>;
}

/** The source's side of a suite in `scope` (call it in the describe block, beside the scope). */
export function useSource(scope: OutboxScope, source: SourceCase): SourceApps {
  const log = source.name === 'log' ? logObjects(scope, source.db) : undefined;
  const options = new Map<string, HarnessOverrides>();

  async function prepare(table: string, sweep: SourceSweep = {}): Promise<HarnessOverrides> {
    if (log === undefined) return {};
    const made = options.get(table);
    if (made !== undefined) return made;
    const observe = await log.make(table, {
      sweepIntervalMs:
        sweep.sweepIntervalMs === undefined || sweep.sweepIntervalMs === 'off'
          ? NO_SWEEP_MS
          : sweep.sweepIntervalMs,
      standbyRetryMs: 200,
    });
    const overrides: HarnessOverrides = { autoStart: true, delivery: observe };
    options.set(table, overrides);
    return overrides;
  }

  const started = (table: string): Promise<void> => log?.started(table) ?? Promise.resolve();

  async function dispatcherApp<P extends OutboxPublisher>(
    table: string,
    publisher: P,
    overrides: HarnessOverrides = {},
  ): Promise<OutboxApp<P>> {
    const observed = await prepare(table);
    const app = await scope.open<P>({
      ...dispatchTestApp(publisher, mergeOutboxOptions(overrides, observed)),
      table,
    });
    await started(table);
    return app;
  }

  return {
    prepare,
    started,
    async boot(publisher, overrides = {}, sweep = {}) {
      const table = await scope.table('outbox_s');
      await prepare(table, sweep);
      return dispatcherApp(table, publisher, overrides);
    },
    dispatcherApp,
    async deliver(h, what, done, timeoutMs = 30_000) {
      if (source.name === 'poll') await dispatchUntil(h, what, done, timeoutMs);
      else await waitFor(what, done, { timeoutMs, intervalMs: 50 });
    },
  };
}

type LogObserver = ReturnType<typeof logTailing>;

interface LogObjects {
  /** Makes the table's log objects and returns the observer of a slot made for it. */
  make(table: string, options: LogTailingOptions): Promise<LogObserver>;
  started(table: string): Promise<void>;
}

function logObjects(scope: OutboxScope, db: TestDatabase): LogObjects {
  return db.name === 'postgres' ? postgresLog(scope) : mariadbLog(scope);
}

/**
 * PostgreSQL: a publication and a slot of this run per table. The slot is made by the app at
 * its start; both are dropped after the test, and after the block whatever a failed test left.
 */
function postgresLog(scope: OutboxScope): LogObjects {
  const made = new Set<string>();
  scope.defer(async () => {
    for (const name of made) await dropPostgresLog(scope.ds, name, 0);
  }, 'block');
  return {
    async make(table, options) {
      const name = uniqueLogName();
      made.add(name);
      // Deferred before the apps on the table open, so it runs after they closed.
      scope.defer(async () => {
        await dropPostgresLog(scope.ds, name, 15_000);
        made.delete(name);
      });
      for (const statement of postgresLogTailingDdl(
        outboxTableNames(table, null, 'double'),
        name,
      )) {
        await scope.ds.query(statement);
      }
      return logTailing({ ...options, slotName: name, publicationName: name });
    },
    started: () => Promise.resolve(),
  };
}

/**
 * Drops the slot `name` of this run once no reader holds it (a closed app's reader lets go
 * within moments; `waitMs` 0 drops it only if free), and its publication.
 */
async function dropPostgresLog(ds: DataSource, name: string, waitMs: number): Promise<void> {
  if (!ds.isInitialized) return;
  const free = async (): Promise<boolean> => {
    const rows: { active: boolean }[] = await ds.query(
      'SELECT active FROM pg_replication_slots WHERE slot_name = $1',
      [name],
    );
    return rows.every((r) => !r.active);
  };
  if (waitMs > 0) await waitFor(`slot ${name} released`, free, { timeoutMs: waitMs });
  await ds.query(
    'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active',
    [name],
  );
  await ds.query(`DROP PUBLICATION IF EXISTS "${name}"`);
}

/** MariaDB: the position table of each table, dropped after the test (and after the block). */
function mariadbLog(scope: OutboxScope): LogObjects {
  const made = new Set<string>();
  const drop = async (table: string): Promise<void> => {
    for (const statement of mysqlLogTailingDrop(outboxTableNames(table, null, 'backtick')))
      await scope.ds.query(statement);
    made.delete(table);
  };
  scope.defer(async () => {
    for (const table of made) await drop(table);
  }, 'block');
  return {
    async make(table, options) {
      made.add(table);
      scope.defer(() => drop(table));
      for (const statement of mysqlLogTailingDdl(outboxTableNames(table, null, 'backtick')))
        await scope.ds.query(statement);
      return logTailing({ ...options, binlogClient: loadZongJi() });
    },
    async started(table) {
      await waitFor('the binlog reader stored its first position', async () => {
        const rows: unknown[] = await scope.ds.query(
          `SELECT 1 FROM \`${table}_log_position\` WHERE id = 1`,
        );
        return rows.length === 1;
      });
    },
  };
}

/**
 * `describeWith` in the poll's run only: for a suite of the poll's own behaviour in a spec the
 * `sources` project runs too (that project runs only the spec's source-parameterised suites).
 */
export function describeWithOnPoll(
  services: Parameters<typeof describeWith>[0],
  name: string,
  fn: () => void,
): void {
  if (selectedSource() === 'poll') describeWith(services, name, fn);
}
