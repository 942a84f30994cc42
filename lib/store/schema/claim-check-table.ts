import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql, StatementRunner } from '../outbox-database';

/** Schema step 10 on one database: the claim-check table made by `statements`. */
export function claimCheckTablePart(statements: (n: OutboxTableNames) => string[]): SchemaPartSql {
  return {
    async ensure(run: StatementRunner, n) {
      for (const statement of statements(n)) await run(statement);
    },
    has: (run, n) =>
      run(`SELECT 1 FROM ${n.claimChecksTable} WHERE 1 = 0`).then(
        () => true,
        () => false,
      ),
    async drop(run, n) {
      await run(`DROP TABLE IF EXISTS ${n.claimChecksTable}`);
    },
  };
}
