import type { MigrationInterface } from 'typeorm';
import {
  outboxTableDdl,
  refuseUnknownTableOptions,
  tablePartitioning,
  tableStepOptions,
  type OutboxTableOptions,
} from '../store/schema/outbox-table-ddl';
import {
  OUTBOX_SCHEMA_STEPS,
  stepIsFor,
  type OutboxSchemaStep,
} from '../store/schema/schema-steps';
import { createOutboxMigration } from './outbox-table.migration';
import { tableMigration } from './table-migration';

type MigrationClass = new () => MigrationInterface;

const STEP_SUBJECT = 'outboxMigrations()';

/** A later schema step as a migration, named after the table, sorting at `timestamp`. */
function stepMigration(
  step: OutboxSchemaStep,
  options: OutboxTableOptions,
  timestamp: number,
): MigrationClass {
  const partitioning = tablePartitioning(options);
  return tableMigration(
    step.migration,
    STEP_SUBJECT,
    options,
    timestamp,
    (database, names, run) => step.apply({ database, names, run, partitioning }),
    (database, names, run) => step.revert({ database, names, run, partitioning }),
  );
}

/**
 * Returns the TypeORM migration classes of one outbox table, oldest first: step 1 creates the
 * outbox table (it is `createOutboxMigration()`, same name and same work, so a DataSource that
 * ran it before runs only what follows), step 2 adds the attempt history `<table>_attempts`,
 * step 3 the cleaner's cut-off indexes, step 4 the binary-payload and broker-attribute columns,
 * step 5 the index of waiting messages, and later versions append their steps to the list. Spread it into the DataSource's
 * `migrations`, once per outbox table.
 *
 * The steps that exist for one module option (6 `ordering.sequence`, 7 `tenants`, 9
 * `dispatcher.claims: 'partitions'`, 10 `claimCheck`) are in the list only when `options.with`
 * names the option: an app that does not use one never runs its step (PostgreSQL's steps 7 and
 * 9 rewrite the table). A step keeps its name and timestamp whichever others are listed.
 * `options.online` is not for migrations (they run in a transaction): make such a step online
 * first with `outbox schema migrate --with … --online`, and the migration then finds it made.
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
  // Validate at definition time so a bad name fails before any migration runs: an unknown key
  // too (`{ table }` would otherwise migrate the default table outbox).
  refuseUnknownTableOptions('outboxMigrations()', options);
  outboxTableDdl('postgres', options);
  const asked = tableStepOptions(options);
  // Step 1 is `createOutboxMigration()`, same name and same work, for DataSources that list it.
  return OUTBOX_SCHEMA_STEPS.flatMap((step, index) => {
    if (!stepIsFor(step, asked)) return [];
    return index === 0
      ? [createOutboxMigration(options, timestamp)]
      : [stepMigration(step, options, timestamp + index)];
  });
}
