import { OutboxTableLayoutError } from '../../errors/outbox-table-layout.error';
import type { ResolvedPartitioningOptions } from '../../options/resolve-partitioning-options';
import { OutboxMessages } from '../../outbox.messages';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import type { OutboxDatabase, PartitionedTables } from '../outbox-database';
import type { OutboxTableLayout } from '../ports/outbox-partitions.port';
import { rangesAhead } from '../partitions/partition-range';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SqlPort } from '../ports/sql-port';

/** The partitioned layout of a database, or a typed error where it has none (SQLite). */
export function partitionedTablesOf(database: OutboxDatabase): PartitionedTables {
  if (database.partitioned === undefined) {
    throw new OutboxOptionsError(
      OutboxMessages.partitioningUnsupported(database.dialect),
      'partitioning',
    );
  }
  return database.partitioned;
}

/** The CLI command that makes the table as the options ask. */
function migrateCommand(n: OutboxTableNames, interval: string | null): string {
  return (
    'npx outbox schema migrate' +
    (n.tableName === 'outbox' ? '' : ` --table ${n.tableName}`) +
    (n.schema === null ? '' : ` --schema ${n.schema}`) +
    (interval === null ? '' : ` --partition-by ${interval}`)
  );
}

function describe(layout: OutboxTableLayout): string {
  switch (layout.kind) {
    case 'missing':
      return 'missing';
    case 'plain':
      return 'a plain (unpartitioned) table';
    case 'partitioned':
      return `partitioned by ${layout.interval}`;
    case 'unrecognised':
      return `partitioned otherwise than the outbox partitions a table (${layout.problem})`;
  }
}

/**
 * Checks that the table is laid out as `partitioning` asks (null: a plain table; undefined:
 * whatever it is, adopted, for tools that do not know the app's options) and answers whether
 * it is partitioned. A missing table passes (`creating`, or the caller's own probe reports it).
 */
export async function checkTableLayout(
  sql: Pick<SqlPort, 'query' | 'isConnected'>,
  database: OutboxDatabase,
  n: OutboxTableNames,
  partitioning: Pick<ResolvedPartitioningOptions, 'interval' | 'premake'> | null | undefined,
  { creating }: { creating: boolean },
): Promise<boolean> {
  if (partitioning !== null && partitioning !== undefined) partitionedTablesOf(database);
  const layouts = database.partitioned;
  if (layouts === undefined || !sql.isConnected) return partitioning != null;
  const layout = await layouts.layout(async (s, p) => (await sql.query(s, p)).rows, n);
  if (partitioning === undefined) return layout.kind === 'partitioned';
  const wanted =
    partitioning === null ? 'a plain table' : `a table partitioned by ${partitioning.interval}`;
  const fail = (fix: string): never => {
    throw new OutboxTableLayoutError(
      OutboxMessages.tableLayoutMismatch(n.table, wanted, describe(layout), fix),
      n.table,
      partitioning === null ? 'plain' : partitioning.interval,
      layout.kind === 'partitioned' ? layout.interval : layout.kind,
    );
  };
  if (layout.kind === 'missing') return partitioning !== null;
  if (partitioning === null) {
    if (layout.kind === 'plain') return false;
    return fail(
      layout.kind === 'partitioned'
        ? `set the module's partitioning option to { interval: '${layout.interval}' } (docs/partitioning.md), or use a plain table.`
        : 'use a table made by "outbox schema migrate", or another --table.',
    );
  }
  if (layout.kind === 'plain') {
    const steps = [
      ...layouts.conversionSteps(
        n,
        partitioning.interval,
        rangesAhead(partitioning.interval, new Date(), partitioning.premake),
      ),
      // It finishes what the steps leave to code (MySQL's NO PAD collations).
      `-- then: ${migrateCommand(n, partitioning.interval)}`,
    ];
    if (creating) {
      throw new OutboxTableLayoutError(
        OutboxMessages.partitionConversionRefused(
          n.table,
          partitioning.interval,
          steps.map((s) => `${s};`).join('\n'),
        ),
        n.table,
        partitioning.interval,
        'plain',
      );
    }
    return fail(
      `convert it (docs/partitioning.md, "Converting a plain table"; "${migrateCommand(n, partitioning.interval)}" prints the steps), or leave the partitioning option out.`,
    );
  }
  if (layout.kind === 'unrecognised')
    return fail(
      'use a table made by "outbox schema migrate", or leave the partitioning option out.',
    );
  if (layout.interval !== partitioning.interval) {
    return fail(
      `set partitioning.interval to '${layout.interval}' as the table is made (changing the interval of a table is a conversion: docs/partitioning.md).`,
    );
  }
  // The guard is part of the layout: without it idempotent enqueues would fail.
  try {
    await sql.query(`SELECT 1 FROM ${n.idsTable} WHERE 1 = 0`);
  } catch {
    fail(
      `its guard ${n.idsTable} is missing: run "${migrateCommand(n, partitioning.interval)}", which adds it.`,
    );
  }
  return true;
}
