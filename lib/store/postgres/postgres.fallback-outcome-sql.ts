import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql, StatementRunner } from '../outbox-database';
import {
  ATTEMPT_OUTCOMES_BEFORE_FALLBACK,
  attemptOutcomeCheck,
  attemptOutcomeCheckName,
} from '../shared-sql/attempt-history';

/** The attempt history's check constraints on `outcome`, with their definitions. */
async function outcomeChecks(
  run: StatementRunner,
  n: OutboxTableNames,
): Promise<{ name: string; definition: string }[]> {
  return (await run(
    `SELECT c.conname AS name, pg_get_constraintdef(c.oid) AS definition FROM pg_constraint AS c
WHERE c.conrelid = to_regclass($1) AND c.contype = 'c' AND pg_get_constraintdef(c.oid) LIKE '%outcome%'`,
    [n.attemptsTable],
  )) as { name: string; definition: string }[];
}

/** Replaces the outcome checks with one named check over `outcomes`. */
async function replaceCheck(
  run: StatementRunner,
  n: OutboxTableNames,
  outcomes?: readonly string[],
): Promise<void> {
  const drops = (await outcomeChecks(run, n)).map(
    (check) => `DROP CONSTRAINT ${n.quote(check.name)}`,
  );
  // One ALTER: the table is never without its check, and is scanned once for the new one.
  await run(
    `ALTER TABLE ${n.attemptsTable} ${[...drops, `ADD CONSTRAINT ${n.quote(attemptOutcomeCheckName(n))} ${attemptOutcomeCheck(outcomes)}`].join(', ')}`,
  );
}

/** Schema step 8 on PostgreSQL: the attempt history's outcome check admits `fallback`. */
export const postgresFallbackOutcome: SchemaPartSql = {
  async ensure(run, n) {
    if (!(await postgresFallbackOutcome.has(run, n))) await replaceCheck(run, n);
  },
  has: async (run, n) =>
    (await outcomeChecks(run, n)).every((check) => check.definition.includes("'fallback'")),
  async drop(run, n) {
    // The narrow check would refuse them: the rows of fallback runs go with the step.
    await run(`DELETE FROM ${n.attemptsTable} WHERE outcome = 'fallback'`);
    await replaceCheck(run, n, ATTEMPT_OUTCOMES_BEFORE_FALLBACK);
  },
};
