import type { SchemaPartSql } from '../outbox-database';
import { fallbackOutcomeStep, type OutcomeCheck } from '../shared-sql/outcome-check-step';

/**
 * Schema step 8 on MySQL/MariaDB: the attempt history's outcome check admits `fallback`. Tables
 * made before step 8 have an unnamed check (MySQL names it `<table>_chk_1`, MariaDB
 * `CONSTRAINT_1`), found by its clause.
 */
export const mysqlFallbackOutcome: SchemaPartSql = fallbackOutcomeStep(async (run, n) => {
  const schema = n.schema === null ? 'DATABASE()' : '?';
  return (await run(
    `SELECT t.CONSTRAINT_NAME AS name, c.CHECK_CLAUSE AS definition
FROM information_schema.TABLE_CONSTRAINTS AS t
JOIN information_schema.CHECK_CONSTRAINTS AS c
  ON c.CONSTRAINT_SCHEMA = t.CONSTRAINT_SCHEMA AND c.CONSTRAINT_NAME = t.CONSTRAINT_NAME
WHERE t.TABLE_SCHEMA = ${schema} AND t.TABLE_NAME = ? AND t.CONSTRAINT_TYPE = 'CHECK'
  AND c.CHECK_CLAUSE LIKE '%outcome%'`,
    n.schema === null ? [`${n.tableName}_attempts`] : [n.schema, `${n.tableName}_attempts`],
  )) as OutcomeCheck[];
});
