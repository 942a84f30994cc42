import type { MigrationInterface } from 'typeorm';
import { outboxTableDdl } from '../store/schema/outbox-table-ddl';
import type { OutboxTableOptions } from '../store/schema/outbox-table-ddl';
import { createOutboxMigration } from './outbox-table.migration';
import { runAll, tableMigration } from './table-migration';
import { layoutForNewTables } from '../store/schema/message-id-layout';

type MigrationClass = new () => MigrationInterface;

/** One schema change: its migration, named after the table, sorting at `timestamp`. */
type MigrationStep = (options: OutboxTableOptions, timestamp: number) => MigrationClass;

const STEP_SUBJECT = 'outboxMigrations()';

/** Step 2: the attempt history `<table>_attempts` beside an existing outbox table. */
const addAttemptHistory: MigrationStep = (options, timestamp) =>
  tableMigration(
    'AddOutboxAttemptHistory',
    STEP_SUBJECT,
    options,
    timestamp,
    // In the id layout of the outbox table (CHAR(36) ids stay so until converted).
    async (database, names, run) =>
      runAll(
        run,
        database.createHistoryTable(names, await layoutForNewTables(database, run, names)),
      ),
    (database, names, run) => runAll(run, database.dropHistoryTable(names)),
  );

/**
 * Step 3: the cleaner's cut-off indexes on an existing outbox table (step 1 makes them on a new
 * one, so here they are usually there already and nothing happens).
 */
const addCleanerIndexes: MigrationStep = (options, timestamp) =>
  tableMigration(
    'AddOutboxCleanerIndexes',
    STEP_SUBJECT,
    options,
    timestamp,
    (database, names, run) => database.ensureCleanerIndexes(run, names),
    (database, names, run) => runAll(run, database.dropCleanerIndexes(names)),
  );

/**
 * Step 4: the binary-payload and broker-attribute columns (`payload_encoding`, `content_type`,
 * `payload_bytes`, `broker_attributes`) on an existing outbox table, added in place without a
 * table rewrite (step 1 makes them on a new one, so there this does nothing).
 */
const addPayloadColumns: MigrationStep = (options, timestamp) =>
  tableMigration(
    'AddOutboxPayloadColumns',
    STEP_SUBJECT,
    options,
    timestamp,
    (database, names, run) => database.ensurePayloadColumns(run, names),
    (database, names, run) => database.dropPayloadColumns(run, names),
  );

/**
 * Step 5: the index of waiting messages by key (`<table>_waiting_idx`, PostgreSQL), which lets
 * a settle skip the keys that have none; on the other databases it does nothing.
 */
const addWaitingIndex: MigrationStep = (options, timestamp) =>
  tableMigration(
    'AddOutboxWaitingIndex',
    STEP_SUBJECT,
    options,
    timestamp,
    async (database, names, run) => database.waitingIndex?.ensure(run, names),
    (database, names, run) => runAll(run, database.waitingIndex?.drop(names) ?? []),
  );

/**
 * The outbox's schema changes in order. Never reorder, rename or change a step: TypeORM knows
 * the ones it ran by name. A new schema change is a new step at the end.
 */
const STEPS: readonly MigrationStep[] = [
  createOutboxMigration,
  addAttemptHistory,
  addCleanerIndexes,
  addPayloadColumns,
  addWaitingIndex,
];

/**
 * Returns the TypeORM migration classes of one outbox table, oldest first: step 1 creates the
 * outbox table (it is `createOutboxMigration()`, same name and same work, so a DataSource that
 * ran it before runs only what follows), step 2 adds the attempt history `<table>_attempts`,
 * step 3 the cleaner's cut-off indexes, step 4 the binary-payload and broker-attribute columns,
 * step 5 the index of waiting messages, and later versions append their steps to the list. Spread it into the DataSource's
 * `migrations`, once per outbox table.
 *
 * Each step is named after its table (`CreateOutboxTable_outbox_1763800000000`,
 * `AddOutboxAttemptHistory_outbox_1763800000001`), so several outbox tables can share one
 * DataSource.
 *
 * @param timestamp where step 1 sorts among the DataSource's other migrations, in milliseconds
 *   since 1970 (TypeORM orders migrations by it); step n sorts at `timestamp + n - 1`. Pass the
 *   timestamp you gave `createOutboxMigration()`, if you gave one. @default 1763800000000
 *
 * @example
 * new DataSource({ ..., migrations: [...outboxMigrations({ tableName: 'outbox' })] })
 */
export function outboxMigrations(
  options: OutboxTableOptions = {},
  timestamp = 1_763_800_000_000,
): MigrationClass[] {
  // Validate at definition time so a bad name fails before any migration runs.
  outboxTableDdl('postgres', options);
  return STEPS.map((step, index) => step(options, timestamp + index));
}
