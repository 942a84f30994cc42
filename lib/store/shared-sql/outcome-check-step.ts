import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql, StatementRunner } from '../outbox-database';
import {
  ATTEMPT_OUTCOMES_BEFORE_FALLBACK,
  attemptOutcomeCheck,
  attemptOutcomeCheckName,
} from './attempt-history';

/** A check constraint on the attempt history's `outcome`, as the database's catalog reports it. */
export interface OutcomeCheck {
  readonly name: string;
  readonly definition: string;
}

/**
 * Schema step 8 (the attempt history's outcome check admits `fallback`) for a database that can
 * drop and add a check in one ALTER; only reading the checks from its catalog differs.
 */
export function fallbackOutcomeStep(
  outcomeChecks: (run: StatementRunner, n: OutboxTableNames) => Promise<OutcomeCheck[]>,
): SchemaPartSql {
  /** Replaces the outcome checks with one named check over `outcomes`. */
  const replaceCheck = async (
    run: StatementRunner,
    n: OutboxTableNames,
    outcomes?: readonly string[],
  ): Promise<void> => {
    const drops = (await outcomeChecks(run, n)).map(
      (check) => `DROP CONSTRAINT ${n.quote(check.name)}`,
    );
    // One ALTER: the table is never without its check, and is scanned once for the new one.
    await run(
      `ALTER TABLE ${n.attemptsTable} ${[...drops, `ADD CONSTRAINT ${n.quote(attemptOutcomeCheckName(n))} ${attemptOutcomeCheck(outcomes)}`].join(', ')}`,
    );
  };
  const has = async (run: StatementRunner, n: OutboxTableNames): Promise<boolean> =>
    (await outcomeChecks(run, n)).every((check) => check.definition.includes("'fallback'"));
  return {
    async ensure(run, n) {
      if (!(await has(run, n))) await replaceCheck(run, n);
    },
    has,
    async drop(run, n) {
      // The narrow check would refuse them: the rows of fallback runs go with the step.
      await run(`DELETE FROM ${n.attemptsTable} WHERE outcome = 'fallback'`);
      await replaceCheck(run, n, ATTEMPT_OUTCOMES_BEFORE_FALLBACK);
    },
  };
}
