import { describeError } from '../../internal/describe-error';
import type { SqlPort } from '../ports/sql-port';
import { databaseAnswers } from './database-answers';
import { outboxDatabase, outboxDialectOf, tableNamesFor } from './outbox-table-ddl';
import { OUTBOX_SCHEMA_STEPS } from './schema-steps';

/** Whether a table can deliver by partitions, and why not where it cannot. */
export type DeliveryPartitionsOffer =
  | { readonly offered: true }
  | {
      readonly offered: false;
      /** `'database'`: this database has no delivery partitions; `'step'`: the table lacks step 9. */
      readonly lacking: 'database' | 'step' | 'unknown';
      /** The failed probe's message (`'step'`), for the log line. */
      readonly reason?: string;
    };

/**
 * Asks the table whether it has everything delivery partitions need: a database that has them,
 * and schema step 9 made whole (the probes bootstrap runs where `claims: 'partitions'` is
 * given). Read only. A database that does not answer is `'unknown'`: bootstrap fails on it next,
 * with its own message.
 */
export async function deliveryPartitionsOffer(
  sql: SqlPort,
  table: { readonly tableName: string; readonly schema: string | null },
): Promise<DeliveryPartitionsOffer> {
  const database = outboxDatabase(sql.databaseType);
  const step = OUTBOX_SCHEMA_STEPS.find((s) => s.part === 'delivery-partitions');
  if (!database.deliveryPartitionsOffered || step?.check === undefined) {
    return { offered: false, lacking: 'database' };
  }
  if (!sql.isConnected) return { offered: false, lacking: 'unknown' };
  const names = tableNamesFor(outboxDialectOf(sql.databaseType), {
    tableName: table.tableName,
    schema: table.schema ?? undefined,
  });
  for (const statement of step.check.probes(names)) {
    try {
      await sql.query(statement);
    } catch (error) {
      if (!(await databaseAnswers(sql))) return { offered: false, lacking: 'unknown' };
      return { offered: false, lacking: 'step', reason: describeError(error) };
    }
  }
  return { offered: true };
}
