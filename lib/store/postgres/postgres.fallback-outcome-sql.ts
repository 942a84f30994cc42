import type { SchemaPartSql } from '../outbox-database';
import { fallbackOutcomeStep, type OutcomeCheck } from '../shared-sql/outcome-check-step';

/** Schema step 8 on PostgreSQL: the attempt history's outcome check admits `fallback`. */
export const postgresFallbackOutcome: SchemaPartSql = fallbackOutcomeStep(
  async (run, n) =>
    (await run(
      `SELECT c.conname AS name, pg_get_constraintdef(c.oid) AS definition FROM pg_constraint AS c
WHERE c.conrelid = to_regclass($1) AND c.contype = 'c' AND pg_get_constraintdef(c.oid) LIKE '%outcome%'`,
      [n.attemptsTable],
    )) as OutcomeCheck[],
);
