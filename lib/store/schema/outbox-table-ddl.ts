import { OutboxOptionsError } from '../../errors/outbox-options.error';
import type { OutboxPartitioningOptions } from '../../options/outbox.options';
import {
  resolvePartitioningOptions,
  type ResolvedPartitioningOptions,
} from '../../options/resolve-partitioning-options';
import { OutboxMessages } from '../../outbox.messages';
import { refuseUnknownKeys } from '../../internal/known-keys';
import type { OutboxDatabase } from '../outbox-database';
import {
  applySchemaSteps,
  OUTBOX_SCHEMA_STEPS,
  OUTBOX_STEP_OPTIONS,
  stepIsFor,
  type OutboxStepOption,
} from './schema-steps';
import type { SchemaOnline } from '../outbox-database';
import { outboxTableStatements } from './table-statements';
import { OUTBOX_DATABASES, outboxDatabaseOf, type OutboxDriverType } from '../outbox-databases';
import {
  assertIdentifier,
  OUTBOX_TABLE_SUFFIXES,
  outboxTableNames,
  type OutboxTableNames,
  type OutboxTableRole,
} from '../../internal/sql-identifier';
import type { SqlPort } from '../ports/sql-port';
import { layoutForNewTables } from './message-id-layout';

/** The database families the outbox supports. */
export type OutboxDialect = (typeof OUTBOX_DATABASES)[OutboxDriverType]['dialect'];

/** The database of a TypeORM driver type (or a dialect name), or throws a clear error. */
export function outboxDatabase(type: string): OutboxDatabase {
  const database = outboxDatabaseOf(type);
  if (database === undefined) {
    throw new OutboxOptionsError(
      OutboxMessages.unsupportedDatabase(type, listed(Object.keys(OUTBOX_DATABASES))),
      'dataSource',
    );
  }
  return database;
}

/** "a, b or c". */
function listed(names: readonly string[]): string {
  return names.length < 2 ? names.join('') : `${names.slice(0, -1).join(', ')} or ${names.at(-1)}`;
}

/** Maps a TypeORM driver type to its outbox dialect, or throws a clear error. */
export function outboxDialectOf(type: string): OutboxDialect {
  return outboxDatabase(type).dialect as OutboxDialect;
}

/** Where the outbox table lives. */
export interface OutboxTableOptions {
  /** @default 'outbox' */
  tableName?: string;
  /** PostgreSQL schema, or MySQL database. @default the connection's */
  schema?: string;
  /**
   * Make the table time-partitioned (PostgreSQL, MySQL/MariaDB): `interval` and `premake` as
   * the module's `partitioning` option, whose object may be passed as it is.
   * @default none (a plain table)
   */
  partitioning?: OutboxPartitioningOptions;
  /**
   * The module options whose schema steps the table gets too: `'sequence'`
   * (`ordering.sequence`, step 6), `'tenants'` (step 7), `'partitions'` (`dispatcher.claims:
   * 'partitions'`, step 9), `'claimCheck'` (step 10). A table without one of them serves every
   * app that does not set that option and pays nothing for it; an app that sets it refuses to
   * start until the table has it, naming this fix.
   * @default [] (none of them)
   */
  with?: readonly OutboxStepOption[];
  /**
   * Make the steps that would block writes on a table with rows (PostgreSQL's steps 7 and 9
   * rewrite it) in a form that lets writes go on: a plain column filled by a trigger and by
   * batches of short transactions, then `CREATE INDEX CONCURRENTLY`. Needs a connection outside
   * a transaction (not a TypeORM migration's). `true`, or the size of the batches.
   * @default false
   */
  online?: boolean | SchemaOnline;
}

/** The options with a step of their own, as a message lists them: `'sequence', 'tenants', …`. */
function stepOptionList(): string {
  return OUTBOX_STEP_OPTIONS.map((option) => `'${option}'`).join(', ');
}

/** `options.with`, checked: each a known option, or an `OutboxOptionsError` naming them. */
export function tableStepOptions(options: OutboxTableOptions): readonly OutboxStepOption[] {
  const asked: unknown = options.with ?? [];
  if (!Array.isArray(asked)) {
    throw new OutboxOptionsError(
      OutboxMessages.unknownStepOption(String(asked), stepOptionList()),
      'with',
    );
  }
  for (const option of asked as unknown[]) {
    if (!OUTBOX_STEP_OPTIONS.includes(option as OutboxStepOption)) {
      throw new OutboxOptionsError(
        OutboxMessages.unknownStepOption(String(option), stepOptionList()),
        'with',
      );
    }
  }
  return asked as OutboxStepOption[];
}

/** `options.online` as the steps take it: undefined for the one-statement forms. */
export function tableOnline(options: OutboxTableOptions): SchemaOnline | undefined {
  const online = options.online ?? false;
  if (online === false) return undefined;
  return online === true ? {} : online;
}

/** `options.partitioning` checked (the lease is the module's business: not checked here). */
export function tablePartitioning(options: OutboxTableOptions): ResolvedPartitioningOptions | null {
  return resolvePartitioningOptions(options.partitioning, 0);
}

const TABLE_OPTION_KEYS = {
  tableName: true,
  schema: true,
  partitioning: true,
  with: true,
  online: true,
} satisfies Record<keyof OutboxTableOptions, true>;

/**
 * Refuses, with `OutboxOptionsError`, a key of a schema function's table options that it does
 * not read: `dropOutboxTables(ds, { table: 'orders_outbox' })` would otherwise drop the default
 * table `outbox`, and `ensureOutboxTable(ds, { table })` create it. `auditTable`: the options
 * also take `dropOutboxTables`' audit table.
 */
export function refuseUnknownTableOptions(
  subject: string,
  options: unknown,
  auditTable = false,
): void {
  refuseUnknownKeys(
    options,
    auditTable
      ? {
          '': { tableName: true, schema: true, auditTable: true },
          auditTable: { tableName: true, schema: true },
        }
      : { '': TABLE_OPTION_KEYS },
    ({ path, suggestion, accepted }) =>
      new OutboxOptionsError(
        OutboxMessages.unknownRuntimeOption(subject, path, suggestion, accepted),
        path,
      ),
  );
}

export function tableNamesFor(
  dialect: OutboxDialect,
  options: OutboxTableOptions = {},
): OutboxTableNames {
  const database = OUTBOX_DATABASES[dialect];
  const tableName = options.tableName ?? 'outbox';
  assertIdentifier(tableName, 'tableName');
  const schema = options.schema ?? null;
  if (schema !== null) assertIdentifier(schema, 'schema');
  return outboxTableNames(tableName, database.schemas ? schema : null, database.quoting);
}

/**
 * The statements that create the outbox table (and its indexes) on one dialect, with its
 * attempt history `<table>_attempts`. Each is `IF NOT EXISTS` (on MySQL/MariaDB, the NO PAD
 * collation's ALTER runs only where a column lacks it): run on an existing table, they add what
 * it lacks. `dialect`: also 'mariadb', the same statements as 'mysql'.
 */
export function outboxTableDdl(
  dialect: OutboxDialect | 'mariadb',
  options: OutboxTableOptions = {},
): string[] {
  refuseUnknownTableOptions('outboxTableDdl()', options);
  const database = outboxDatabase(dialect);
  const names = tableNamesFor(database.dialect as OutboxDialect, options);
  return [
    ...outboxTableStatements(database, names, tablePartitioning(options)),
    ...(database.schema.finishTableDdl?.(names) ?? []),
    ...database.schema.createHistoryTable(names),
  ];
}

/**
 * Every statement that makes a new outbox table at the latest schema version, for the steps
 * of the options asked (`with`): `outboxTableDdl()` (steps 1 and 2, with the parts step 1
 * makes on a new table), then each later step's own statements, recorded from the step as
 * `outbox schema migrate` runs it on a database where nothing of it exists yet. What `outbox
 * schema print` prints: made from the one step list, it has every step a migrate has.
 */
export async function outboxSchemaStatements(
  dialect: OutboxDialect | 'mariadb',
  options: OutboxTableOptions = {},
): Promise<string[]> {
  const database = outboxDatabase(dialect);
  const names = tableNamesFor(database.dialect as OutboxDialect, options);
  const statements = outboxTableDdl(dialect, options);
  const asked = tableStepOptions(options);
  // Reads (catalog lookups, probes) answer "nothing there"; every other statement is kept.
  const recorded: string[] = [];
  const run = (statement: string): Promise<unknown[]> => {
    if (!/^\s*(SELECT|PRAGMA|SHOW)\b/i.test(statement)) recorded.push(statement);
    return Promise.resolve([]);
  };
  for (const [index, step] of OUTBOX_SCHEMA_STEPS.entries()) {
    if (index < 2 || step.madeByTable === true || !stepIsFor(step, asked)) continue;
    await step.apply({ database, names, run, partitioning: tablePartitioning(options) });
  }
  return [...statements, ...recorded];
}

/**
 * The statements that create the archive `<table>_archive`, where the cleaner moves rows past
 * their retention when `cleaner.archive` is on. Each is `IF NOT EXISTS`. The archive is the
 * app's to keep: nothing here ever drops or prunes it.
 */
export function outboxArchiveTableDdl(
  dialect: OutboxDialect,
  options: OutboxTableOptions = {},
): string[] {
  refuseUnknownTableOptions('outboxArchiveTableDdl()', options);
  return OUTBOX_DATABASES[dialect].schema.createArchiveTable(tableNamesFor(dialect, options));
}

/** Creates the archive `<table>_archive` if it does not exist (see `outboxArchiveTableDdl`). */
export async function createOutboxArchiveTable(
  sql: SqlPort,
  options: OutboxTableOptions = {},
): Promise<void> {
  refuseUnknownTableOptions('createOutboxArchiveTable()', options);
  const dialect = outboxDialectOf(sql.databaseType);
  const database = OUTBOX_DATABASES[dialect];
  const names = tableNamesFor(dialect, options);
  const ids = await layoutForNewTables(database, runnerOf(sql), names);
  for (const statement of database.schema.createArchiveTable(names, ids)) {
    await sql.query(statement);
  }
}

/** The port as a `StatementRunner` that answers the rows. */
function runnerOf(sql: SqlPort): (statement: string, params?: unknown[]) => Promise<unknown> {
  return async (statement, params) => (await sql.query(statement, params)).rows;
}

/**
 * The tables named after the outbox table that are made apart from its schema steps, each by a
 * migration of its own, which the schema's down leaves alone: the archive (the app's record,
 * `createOutboxArchiveMigration`) and log tailing's binlog position (`logTailingMigration`).
 */
const MADE_APART: ReadonlySet<OutboxTableRole> = new Set(['archiveTable', 'logPositionTable']);

/**
 * The statements that drop the tables named after the outbox table (`OUTBOX_TABLE_SUFFIXES`),
 * the table itself last (its indexes, partitions and identity sequences go with it), each
 * `IF EXISTS`: what the schema steps made (`'schema'`, a migration's down: the table, its
 * attempt history, key locks, sequence counters and partition guard), or all of them, the
 * archive and the log position too (`'all'`, `dropOutboxTables`).
 */
export function outboxTableDropDdl(
  dialect: OutboxDialect,
  options: OutboxTableOptions = {},
  tables: 'schema' | 'all' = 'schema',
): string[] {
  const names = tableNamesFor(dialect, options);
  const beside = (Object.keys(OUTBOX_TABLE_SUFFIXES) as OutboxTableRole[]).filter(
    (role) => role !== 'table' && (tables === 'all' || !MADE_APART.has(role)),
  );
  return [...beside, 'table' as const].map((role) => `DROP TABLE IF EXISTS ${names[role]}`);
}

/**
 * Creates the outbox table if it does not exist, and brings an older one up to date: every
 * schema step in order (`schema-steps.ts`), as the migrations and `outbox schema migrate` do,
 * but those of options not asked for (`with`).
 */
export async function createOutboxTable(
  sql: SqlPort,
  options: OutboxTableOptions = {},
): Promise<void> {
  refuseUnknownTableOptions('createOutboxTable()', options);
  const dialect = outboxDialectOf(sql.databaseType);
  const online = tableOnline(options);
  await applySchemaSteps(
    {
      database: OUTBOX_DATABASES[dialect],
      names: tableNamesFor(dialect, options),
      run: runnerOf(sql),
      partitioning: tablePartitioning(options),
      ...(online === undefined ? {} : { online }),
    },
    tableStepOptions(options),
  );
}
