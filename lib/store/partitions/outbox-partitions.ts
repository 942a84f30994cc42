import { refuseUnknownCallOptions } from '../../internal/known-keys';
import type {
  OutboxPartitionPolicy,
  OutboxPartitionsPort,
  OutboxPartitionsReport,
} from '../ports/outbox-partitions.port';
import type { OutboxUpkeepPort } from '../ports/outbox-store.port';
import { outboxDatabase, tableNamesFor, outboxDialectOf } from '../schema/outbox-table-ddl';
import type { SqlPort } from '../ports/sql-port';
import { partitionedTablesOf } from '../schema/table-layout';

const TABLE_KEYS = { '': { tableName: true, schema: true } } as const;

const POLICY_KEYS = {
  '': { premake: true, retentionMs: true, deadRetentionMs: true } satisfies Record<
    keyof OutboxPartitionPolicy,
    true
  >,
} as const;

/**
 * The partitions of a partitioned outbox table: their status, and the maintenance the
 * `OutboxPartitionMaintainer` runs. Throws a typed error on a database without partitioned
 * tables (SQLite); on a table that is not partitioned as the outbox makes it, `status` says
 * so and `maintain` changes nothing. An options key it does not read (here, or in the policy
 * of `status` and `maintain`) is refused with `OutboxOptionsError`: `{ table }` would otherwise
 * name the default table `outbox`, and a misspelt `retentionMS` leave the retention unset.
 */
export function outboxPartitions(
  sql: SqlPort,
  table: { tableName?: string; schema?: string | null } = {},
): OutboxPartitionsPort {
  refuseUnknownCallOptions('outboxPartitions()', table, TABLE_KEYS);
  const names = tableNamesFor(outboxDialectOf(sql.databaseType), {
    tableName: table.tableName,
    schema: table.schema ?? undefined,
  });
  const port = partitionedTablesOf(outboxDatabase(sql.databaseType)).partitions(sql, names);
  return {
    status: async (policy, countRows) => {
      refuseUnknownCallOptions('outboxPartitions().status()', policy, POLICY_KEYS);
      return port.status(policy, countRows);
    },
    maintain: async (policy, dryRun) => {
      refuseUnknownCallOptions('outboxPartitions().maintain()', policy, POLICY_KEYS);
      return port.maintain(policy, dryRun);
    },
  };
}

// One pass promotes the next messages of at most this many keys; passes go on until one finds
// nothing, up to MAX_PROMOTION_PASSES (the unlocker takes whatever is left).
const ORPHAN_KEYS_PER_PASS = 1_000;
const MAX_PROMOTION_PASSES = 100;

/**
 * After a maintenance run that dropped partitions: a dead letter dropped with its partition no
 * longer holds its key back, so the key's next waiting message is promoted now, as the cleaner's
 * delete does, rather than when the unlocker next runs (or never, where none runs). The drop is
 * DDL and cannot share a transaction with the promotion. Resolves to the messages promoted.
 */
export async function promoteAfterDrop(
  store: Pick<OutboxUpkeepPort, 'promoteOrphans'>,
  report: OutboxPartitionsReport,
): Promise<number> {
  if (report.dryRun || report.dropped.length === 0) return 0;
  let total = 0;
  for (let pass = 0; pass < MAX_PROMOTION_PASSES; pass++) {
    const promoted = await store.promoteOrphans(ORPHAN_KEYS_PER_PASS);
    total += promoted;
    if (promoted === 0) break;
  }
  return total;
}
