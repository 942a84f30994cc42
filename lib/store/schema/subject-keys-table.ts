import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql, StatementRunner } from '../outbox-database';

/** Schema step 11 on one database: the erasure's key and use tables made by `statements`. */
export function subjectKeysTablePart(statements: (n: OutboxTableNames) => string[]): SchemaPartSql {
  return {
    async ensure(run: StatementRunner, n) {
      for (const statement of statements(n)) await run(statement);
    },
    has: (run, n) =>
      run(
        `SELECT 1 FROM ${n.subjectKeysTable} AS k CROSS JOIN ${n.subjectUsesTable} AS u WHERE 1 = 0`,
      ).then(
        () => true,
        () => false,
      ),
    async drop(run, n) {
      await run(`DROP TABLE IF EXISTS ${n.subjectUsesTable}`);
      await run(`DROP TABLE IF EXISTS ${n.subjectKeysTable}`);
    },
  };
}
