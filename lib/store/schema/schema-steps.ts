import { OutboxTableMissingError } from '../../errors/outbox-table-missing.error';
import { describeError } from '../../internal/describe-error';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import { OutboxMessages, type OutboxTableRef } from '../../outbox.messages';
import { keySequenceProbes } from '../shared-sql/key-sequence';
import { payloadColumnsProbe } from './payload-columns';
import { tenantColumnProbe } from './tenant-column';
import type {
  OutboxDatabase,
  SchemaOnline,
  SchemaPartSql,
  StatementRunner,
} from '../outbox-database';
import { layoutForNewTables } from './message-id-layout';
import { runAll } from './run-statements';
import { checkTableLayout } from './table-layout';
import { outboxTableStatements, type TablePartitioning } from './table-statements';

/**
 * The module options a schema step exists for. A table made or migrated without one of them
 * serves every app that does not set that option; an app that sets it refuses to start on a
 * table without its step, naming the fix (`with: ['tenants']`, `--with tenants`).
 */
export type OutboxStepOption = 'sequence' | 'tenants' | 'partitions' | 'claimCheck' | 'erasure';

/** Every `OutboxStepOption`, in step order: `with` them all, a table gets every step. */
export const OUTBOX_STEP_OPTIONS: readonly OutboxStepOption[] = [
  'sequence',
  'tenants',
  'partitions',
  'claimCheck',
  'erasure',
];

/** What a schema step works on: one outbox table on one database, through one runner. */
export interface SchemaStepContext {
  readonly database: OutboxDatabase;
  readonly names: OutboxTableNames;
  /** Answers the rows of a statement (a port, a migration's query runner). */
  readonly run: StatementRunner;
  /** The layout asked for: step 1 makes a new table so, and refuses an existing one without it. */
  readonly partitioning: TablePartitioning;
  /**
   * Make a step that would rewrite the table in a way that lets writes go on (PostgreSQL: a
   * plain column filled by a trigger and by batches, `CREATE INDEX CONCURRENTLY`); needs a
   * runner outside a transaction. Left out: the step's one-statement form.
   */
  readonly online?: SchemaOnline;
}

/** What a store's options need of the schema, as bootstrap (`createOutboxStore`) reads them. */
export interface SchemaNeeds {
  /** `ordering.sequence`: the enqueue numbers keys. */
  readonly sequence: boolean;
  /** The `tenants` option is set. */
  readonly tenants: boolean;
  /** This instance delivers by partitions (`dispatcher.claims: 'partitions'`, and it dispatches). */
  readonly partitions: boolean;
  /** This instance publishes and cleans with the `claimCheck` option. */
  readonly claimChecks?: boolean;
  /** This instance seals personal data with the `erasure` option. */
  readonly erasure?: boolean;
}

/**
 * How bootstrap checks that a table has a step, so that a table without it fails there and not
 * at the first claim or enqueue that needs it. A feature that needs a new step says here which
 * options need it; `createOutboxStore` runs every step's check in one loop.
 */
export interface SchemaStepCheck {
  /** Whether a store with these options needs the step; left out: every store does. */
  readonly neededBy?: (needs: SchemaNeeds) => boolean;
  /**
   * Why the database cannot have the step at all (it lacks its SQL), refused before any probe
   * as an `OutboxOptionsError` on `option` (the option that asked for it); null where it can.
   * Left out: every database can.
   */
  readonly option?: string;
  readonly unsupported?: (
    database: OutboxDatabase,
    table: string,
    databaseType: string,
  ) => string | null;
  /** Reads that touch no row and fail on a table without the step. */
  probes(names: OutboxTableNames): readonly string[];
  /** The error's words, with the probe's failure as `reason`; `step` is this step's number. */
  message(table: string, reason: string, ref: OutboxTableRef, step: number): string;
}

/**
 * One change of the outbox schema. The steps below are the one list from which the TypeORM
 * migrations (`outboxMigrations()`), `createOutboxTable`/`ensureOutboxTable` and the Kysely
 * migration, `outbox schema migrate` and `outbox schema status` are all made.
 */
export interface OutboxSchemaStep {
  readonly part:
    | 'table'
    | 'attempt-history'
    | 'cleaner-indexes'
    | 'payload-columns'
    | 'waiting-index'
    | 'key-sequence'
    | 'tenant-column'
    | 'fallback-outcome'
    | 'delivery-partitions'
    | 'claim-checks'
    | 'subject-keys';
  /** The TypeORM migration's name prefix: never changed, since TypeORM knows its steps by name. */
  readonly migration: string;
  /**
   * What the table lacks without this step, in words that say what migrate does about it; null
   * when it has it. Read only, outside a transaction (a failed probe aborts PostgreSQL's).
   */
  missing(context: SchemaStepContext): Promise<string | null>;
  /** Step 1 makes this part on a new table already (its statements are in `createTable`). */
  readonly madeByTable?: true;
  /**
   * The option this step exists for: the migrations, `createOutboxTable` and `outbox schema
   * migrate` make it only when asked (`with`). Left out: every table gets it.
   */
  readonly forOption?: OutboxStepOption;
  /**
   * How making the step on a table that has rows blocks writes on `database` (in words, for
   * docs, status and the migrate report); null where it does not.
   */
  rewrites(database: OutboxDatabase): string | null;
  /** What `outbox schema migrate` reports after adding it to an existing table. */
  added(names: OutboxTableNames): string;
  /** Makes it; does nothing where it is there already. */
  apply(context: SchemaStepContext): Promise<void>;
  /** Undoes it (the step's down migration). */
  revert(context: SchemaStepContext): Promise<void>;
  /**
   * Bootstrap's check of the step. Left out: bootstrap does not check it (steps 1 and 2 have
   * checks of their own there; the others a store works without, or reads whether it has).
   */
  readonly check?: SchemaStepCheck;
}

/** Answers whether a statement runs (a probe); outside a transaction only. */
function answers(run: StatementRunner, statement: string): Promise<boolean> {
  return run(statement).then(
    () => true,
    () => false,
  );
}

/** A probe naming the columns that 0.1's table lacks. */
function columnsProbe(names: OutboxTableNames): string {
  return `SELECT 1 FROM ${names.table} WHERE 1 = 0 AND last_attempt_at IS NULL AND dead_at IS NULL`;
}

/** Step 1: the outbox table itself, plain or partitioned, with its indexes (and lock table). */
export const outboxTableStep: OutboxSchemaStep = {
  part: 'table',
  migration: 'CreateOutboxTable',
  rewrites: () => null,
  async missing({ database, names, run }) {
    if (!(await answers(run, `SELECT 1 FROM ${names.table} WHERE 1 = 0`))) {
      return 'the table does not exist: migrate creates it';
    }
    // 0.1's table lacks these columns: it is there, but unusable until dropped (docs/upgrading.md).
    if (!(await answers(run, columnsProbe(names)))) {
      return 'the table lacks last_attempt_at and dead_at (made by 0.1): drop it after draining, then migrate (docs/upgrading.md)';
    }
    return (await database.schema.tableProblem?.(run, names)) ?? null;
  },
  added: () => 'brought the table itself up to date',
  async apply({ database, names, run, partitioning }) {
    // A table already there must have the layout asked for: a plain one is never converted here
    // (the error lists the manual steps).
    await checkTableLayout(
      {
        isConnected: true,
        query: async <R>(sql: string, params?: readonly unknown[]) => ({
          rows: (await run(sql, params === undefined ? undefined : [...params])) as R[],
          affected: 0,
        }),
      },
      database,
      names,
      partitioning,
      { creating: true },
    );
    // In the id layout of a table already there (kept as it is).
    const ids = await layoutForNewTables(database, run, names);
    await runAll(run, outboxTableStatements(database, names, partitioning, ids));
    // e.g. MySQL tables made before 0.3, which compare keys ignoring trailing spaces.
    await database.schema.afterCreateTable?.(run, names);
    // CREATE TABLE IF NOT EXISTS leaves an older table as it is: fail rather than go on with a
    // table this version cannot use (the app start would fail on it anyway).
    try {
      await run(columnsProbe(names));
    } catch (error) {
      throw new OutboxTableMissingError(
        OutboxMessages.tableOutdated(names.table, describeError(error), {
          tableName: names.tableName,
          schema: names.schema ?? undefined,
          keyLock: database.keyLockTable,
        }),
        names.table,
        { cause: error },
      );
    }
  },
  async revert({ database, names, run }) {
    await runAll(run, [
      ...database.schema.dropTable(names),
      // The partitioned layout's guard, if the table had it.
      ...(database.partitioned?.dropTable(names) ?? []),
    ]);
  },
};

/** Step 2: the attempt history `<table>_attempts`, in the id layout of the outbox table. */
const attemptHistory: OutboxSchemaStep = {
  part: 'attempt-history',
  migration: 'AddOutboxAttemptHistory',
  rewrites: () => null,
  missing: async ({ names, run }) =>
    (await answers(run, `SELECT 1 FROM ${names.attemptsTable} WHERE 1 = 0`))
      ? null
      : `${names.attemptsTable} does not exist: migrate creates it`,
  added: (names) => `added its attempt history ${names.attemptsTable}`,
  async apply({ database, names, run }) {
    const ids = await layoutForNewTables(database, run, names);
    await runAll(run, database.schema.createHistoryTable(names, ids));
  },
  revert: ({ database, names, run }) => runAll(run, database.schema.dropHistoryTable(names)),
};

/** A later step that adds one part of a database's `OutboxSchemaSql` to an existing table. */
function partStep(
  part: OutboxSchemaStep['part'],
  migration: string,
  sqlOf: (database: OutboxDatabase) => SchemaPartSql | undefined,
  lacks: (names: OutboxTableNames) => string,
  added: string,
  check?: SchemaStepCheck & { readonly forOption?: OutboxStepOption },
  madeByTable?: true,
): OutboxSchemaStep {
  const { forOption, ...bootstrapCheck } = check ?? {};
  return {
    part,
    migration,
    ...(madeByTable === undefined ? {} : { madeByTable }),
    ...(check === undefined ? {} : { check: bootstrapCheck as SchemaStepCheck }),
    ...(forOption === undefined ? {} : { forOption }),
    rewrites: (database) => sqlOf(database)?.rewrites ?? null,
    async missing({ database, names, run }) {
      const sql = sqlOf(database);
      return sql === undefined || (await sql.has(run, names)) ? null : lacks(names);
    },
    added: () => added,
    async apply({ database, names, run, online }) {
      const sql = sqlOf(database);
      if (sql === undefined) return;
      if (online !== undefined && sql.ensureOnline !== undefined) {
        await sql.ensureOnline(run, names, online);
      } else await sql.ensure(run, names);
    },
    revert: async ({ database, names, run }) => sqlOf(database)?.drop(run, names),
  };
}

/**
 * Step 9's SQL where apps may deliver by partitions: a database whose SQL is written ahead of
 * its dispatcher's side (MySQL/MariaDB for now) has the step made by no migration and the option
 * refused at bootstrap, as one without the SQL.
 */
function deliveryPartitionsOf(database: OutboxDatabase): SchemaPartSql | undefined {
  return database.deliveryPartitionsOffered ? database.schema.deliveryPartitions : undefined;
}

/**
 * The outbox's schema changes in order. Never reorder, rename or change a step: TypeORM knows
 * the ones it ran by name, and a table's version is the number of steps it has in a row. A new
 * schema change is a new step at the end, with its SQL in each database's `OutboxSchemaSql`.
 */
export const OUTBOX_SCHEMA_STEPS: readonly OutboxSchemaStep[] = [
  outboxTableStep,
  attemptHistory,
  // On a new table step 1 makes the indexes, and step 4's columns, already: these add them to
  // an older one.
  partStep(
    'cleaner-indexes',
    'AddOutboxCleanerIndexes',
    (database) => database.schema.cleanerIndexes,
    () =>
      "the cleaner's cut-off indexes are missing: migrate adds them (docs/upgrading.md has the non-blocking PostgreSQL form)",
    "added the cleaner's indexes",
    undefined,
    true,
  ),
  partStep(
    'payload-columns',
    'AddOutboxPayloadColumns',
    (database) => database.schema.payloadColumns,
    () =>
      'the binary-payload and broker-attribute columns (payload_encoding, content_type, payload_bytes, broker_attributes) are missing: migrate adds them in place, rows kept',
    'added the binary-payload and broker-attribute columns (step 4)',
    // Every claim reads them, so a table without them would fail each one.
    {
      probes: (names) => [payloadColumnsProbe(names)],
      message: (table, reason, ref) => OutboxMessages.payloadColumnsMissing(table, reason, ref),
    },
    true,
  ),
  partStep(
    'waiting-index',
    'AddOutboxWaitingIndex',
    (database) => database.schema.waitingIndex,
    (names) =>
      `the index of waiting messages (${names.tableName}_waiting_idx) is missing: migrate adds it (docs/upgrading.md has the non-blocking PostgreSQL form)`,
    'added the index of waiting messages (step 5)',
    undefined,
    true,
  ),
  partStep(
    'key-sequence',
    'AddOutboxKeySequence',
    (database) => database.schema.keySequence,
    (names) =>
      `the sequence column key_seq and the counter table ${names.tableName}_key_seq (ordering.sequence) are missing: migrate adds them, rows kept`,
    'added the key_seq column and the per-key sequence counters (step 6)',
    // Only where the enqueue writes to it: a table without it works otherwise.
    {
      forOption: 'sequence',
      neededBy: (needs) => needs.sequence,
      probes: keySequenceProbes,
      message: (table, reason, ref) => OutboxMessages.keySequenceMissing(table, reason, ref),
    },
  ),
  partStep(
    'tenant-column',
    'AddOutboxTenantColumn',
    (database) => database.schema.tenantColumn,
    (names) =>
      `the tenant_id column and its index (${names.tableName}_tenant_idx) are missing: migrate adds them (needed only with the tenants option, docs/tenants.md)`,
    'added the tenant_id column and its index (for the tenants option, step 7)',
    // Only where tenants are used: a table without it serves every other app.
    {
      forOption: 'tenants',
      neededBy: (needs) => needs.tenants,
      probes: (names) => [tenantColumnProbe(names)],
      message: OutboxMessages.tenantColumnMissing,
    },
  ),
  partStep(
    'fallback-outcome',
    'AllowOutboxFallbackOutcome',
    (database) => database.schema.fallbackOutcome,
    (names) =>
      `${names.attemptsTable} refuses the 'fallback' outcome: migrate widens its check, rows kept (until then a settling @OnOutboxDeadLetter fallback leaves no history row)`,
    "let the attempt history record fallback runs (the 'fallback' outcome, step 8)",
    undefined,
    true,
  ),
  partStep(
    'delivery-partitions',
    'AddOutboxDeliveryPartitions',
    deliveryPartitionsOf,
    (names) =>
      `the delivery_partition column, the tables ${names.tableName}_dispatchers and ${names.tableName}_owners, or columns of them are missing: migrate adds what is missing, rows kept (needed only with dispatcher.claims 'partitions', docs/delivery.md)`,
    "added each row's delivery partition and the partition owners' tables (for dispatcher.claims 'partitions', step 9)",
    // Where this instance delivers by partitions: every read and settle needs it.
    {
      forOption: 'partitions',
      neededBy: (needs) => needs.partitions,
      option: 'dispatcher.claims',
      // Named by its database (the dialect), not by the driver the app happens to use.
      unsupported: (database, table) =>
        deliveryPartitionsOf(database) === undefined
          ? OutboxMessages.partitionsUnsupported(table, database.dialect)
          : null,
      probes: (names) => [
        // lock_key: a table made by an earlier 0.3 build lacks it, and every heartbeat would fail.
        `SELECT 1 FROM ${names.table} AS o CROSS JOIN ${names.ownersTable} AS w CROSS JOIN ${names.dispatchersTable} AS d WHERE 1 = 0 AND o.delivery_partition IS NULL AND d.lock_key IS NULL`,
        // PostgreSQL only (the step's one database): the index an online step makes last, once
        // every row has its partition; a table stopped half way fails here, not at delivery.
        `SELECT '${names.qualify(`${names.tableName}_partition_idx`)}'::regclass`,
      ],
      message: OutboxMessages.partitionsMissing,
    },
  ),
  partStep(
    'claim-checks',
    'AddOutboxClaimChecks',
    (database) => database.schema.claimCheckTable,
    (names) =>
      `the claim-check table ${names.claimChecksTable} is missing: migrate adds it (needed only with the claimCheck option, docs/claim-check.md)`,
    'added the claim-check table (for the claimCheck option, step 10)',
    // Where this instance publishes or cleans with the claim check: both write it.
    {
      forOption: 'claimCheck',
      neededBy: (needs) => needs.claimChecks === true,
      probes: (names) => [`SELECT 1 FROM ${names.claimChecksTable} WHERE 1 = 0`],
      message: OutboxMessages.claimCheckTableMissing,
    },
  ),
  partStep(
    'subject-keys',
    'AddOutboxSubjectKeys',
    (database) => database.schema.subjectKeysTables,
    (names) =>
      `the erasure's tables ${names.subjectKeysTable} and ${names.subjectUsesTable} are missing: migrate adds them (needed only with the erasure option, docs/erasure.md)`,
    "added the erasure's key and use tables (for the erasure option, step 11)",
    // Where this instance seals personal data: every such enqueue reads and writes them.
    {
      forOption: 'erasure',
      neededBy: (needs) => needs.erasure === true,
      probes: (names) => [
        `SELECT 1 FROM ${names.subjectKeysTable} AS k CROSS JOIN ${names.subjectUsesTable} AS u WHERE 1 = 0`,
      ],
      message: OutboxMessages.subjectKeysTableMissing,
    },
  ),
];

/** The number of the step that makes `part` (1 for the table), as status and migrate count them. */
export function schemaStepOf(part: OutboxSchemaStep['part']): number {
  return OUTBOX_SCHEMA_STEPS.findIndex((step) => step.part === part) + 1;
}

/**
 * Whether a table made `with` these options gets `step`: every step but those that exist for an
 * option not asked for.
 */
export function stepIsFor(step: OutboxSchemaStep, options: readonly OutboxStepOption[]): boolean {
  return step.forOption === undefined || options.includes(step.forOption);
}

/**
 * Runs in order every step the table is made `with`: a new table is made whole, an older one
 * brought up to date. A step for an option not asked for is left out (and left as it is where
 * the table has it already).
 */
export async function applySchemaSteps(
  context: SchemaStepContext,
  options: readonly OutboxStepOption[] = [],
): Promise<void> {
  for (const step of OUTBOX_SCHEMA_STEPS) {
    if (stepIsFor(step, options)) await step.apply(context);
  }
}
