import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql, StatementRunner } from '../outbox-database';
import {
  ATTEMPT_COLUMNS,
  ATTEMPT_OUTCOMES_BEFORE_FALLBACK,
  type ATTEMPT_OUTCOMES,
} from '../shared-sql/attempt-history';
import { sqliteCreateHistoryTable } from './sqlite.sql';

/** The attempt history's CREATE statement, as SQLite keeps it. */
async function historyDdl(run: StatementRunner, n: OutboxTableNames): Promise<string | null> {
  const rows = (await run(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?`, [
    `${n.tableName}_attempts`,
  ])) as { sql: string | null }[];
  return rows[0]?.sql ?? null;
}

/**
 * SQLite cannot alter a check: the history is made again with the new one and its rows copied,
 * ids and AUTOINCREMENT counter kept, in one savepoint (a transaction of its own outside one,
 * nested inside a migration's).
 */
async function rebuild(
  run: StatementRunner,
  n: OutboxTableNames,
  outcomes: readonly (typeof ATTEMPT_OUTCOMES)[number][] | undefined,
): Promise<void> {
  const name = `${n.tableName}_attempts`;
  const staging = { ...n, attemptsTable: n.quote(`${n.tableName}_attempts_step8`) };
  const [create, index] = sqliteCreateHistoryTable(n, outcomes);
  await run('SAVEPOINT outbox_attempts_rebuild');
  try {
    await run(`ALTER TABLE ${n.attemptsTable} RENAME TO ${staging.attemptsTable}`);
    // The index keeps its name through the rename: dropped, to be made again on the new table.
    await run(`DROP INDEX IF EXISTS ${n.quote(`${n.tableName}_attempts_msg`)}`);
    for (const statement of [create, index]) if (statement !== undefined) await run(statement);
    await run(
      `INSERT INTO ${n.attemptsTable} (id, ${ATTEMPT_COLUMNS}, failed_at) SELECT id, ${ATTEMPT_COLUMNS}, failed_at FROM ${staging.attemptsTable}`,
    );
    await run(
      `UPDATE sqlite_sequence SET seq = max(seq, coalesce((SELECT s.seq FROM sqlite_sequence AS s WHERE s.name = ?), 0)) WHERE name = ?`,
      [`${n.tableName}_attempts_step8`, name],
    );
    await run(`DROP TABLE ${staging.attemptsTable}`);
    await run('RELEASE outbox_attempts_rebuild');
  } catch (error) {
    await run('ROLLBACK TO outbox_attempts_rebuild');
    await run('RELEASE outbox_attempts_rebuild');
    throw error;
  }
}

/** Schema step 8 on SQLite: the attempt history's outcome check admits `fallback`. */
export const sqliteFallbackOutcome: SchemaPartSql = {
  async ensure(run, n) {
    if (!(await sqliteFallbackOutcome.has(run, n))) await rebuild(run, n, undefined);
  },
  has: async (run, n) => {
    const ddl = await historyDdl(run, n);
    return ddl === null || !ddl.includes("'outage'") || ddl.includes("'fallback'");
  },
  async drop(run, n) {
    // The narrow check would refuse them: the rows of fallback runs go with the step.
    await run(`DELETE FROM ${n.attemptsTable} WHERE outcome = 'fallback'`);
    await rebuild(run, n, [...ATTEMPT_OUTCOMES_BEFORE_FALLBACK]);
  },
};
