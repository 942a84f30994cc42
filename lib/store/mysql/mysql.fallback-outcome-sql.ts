import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql, StatementRunner } from '../outbox-database';
import {
  ATTEMPT_OUTCOMES_BEFORE_FALLBACK,
  attemptOutcomeCheck,
  attemptOutcomeCheckName,
} from '../shared-sql/attempt-history';

/**
 * The attempt history's check constraints on `outcome`, with their clauses. Tables made before
 * step 8 have an unnamed one (MySQL names it `<table>_chk_1`, MariaDB `CONSTRAINT_1`).
 */
async function outcomeChecks(
  run: StatementRunner,
  n: OutboxTableNames,
): Promise<{ name: string; clause: string }[]> {
  const schema = n.schema === null ? 'DATABASE()' : '?';
  return (await run(
    `SELECT t.CONSTRAINT_NAME AS name, c.CHECK_CLAUSE AS clause
FROM information_schema.TABLE_CONSTRAINTS AS t
JOIN information_schema.CHECK_CONSTRAINTS AS c
  ON c.CONSTRAINT_SCHEMA = t.CONSTRAINT_SCHEMA AND c.CONSTRAINT_NAME = t.CONSTRAINT_NAME
WHERE t.TABLE_SCHEMA = ${schema} AND t.TABLE_NAME = ? AND t.CONSTRAINT_TYPE = 'CHECK'
  AND c.CHECK_CLAUSE LIKE '%outcome%'`,
    n.schema === null ? [`${n.tableName}_attempts`] : [n.schema, `${n.tableName}_attempts`],
  )) as { name: string; clause: string }[];
}

/** Replaces the outcome checks with one named check over `outcomes`, in one ALTER. */
async function replaceCheck(
  run: StatementRunner,
  n: OutboxTableNames,
  outcomes?: readonly string[],
): Promise<void> {
  const drops = (await outcomeChecks(run, n)).map(
    (check) => `DROP CONSTRAINT ${n.quote(check.name)}`,
  );
  await run(
    `ALTER TABLE ${n.attemptsTable} ${[...drops, `ADD CONSTRAINT ${n.quote(attemptOutcomeCheckName(n))} ${attemptOutcomeCheck(outcomes)}`].join(', ')}`,
  );
}

/** Schema step 8 on MySQL/MariaDB: the attempt history's outcome check admits `fallback`. */
export const mysqlFallbackOutcome: SchemaPartSql = {
  async ensure(run, n) {
    if (!(await mysqlFallbackOutcome.has(run, n))) await replaceCheck(run, n);
  },
  has: async (run, n) =>
    (await outcomeChecks(run, n)).every((check) => check.clause.includes("'fallback'")),
  async drop(run, n) {
    // The narrow check would refuse them: the rows of fallback runs go with the step.
    await run(`DELETE FROM ${n.attemptsTable} WHERE outcome = 'fallback'`);
    await replaceCheck(run, n, ATTEMPT_OUTCOMES_BEFORE_FALLBACK);
  },
};
