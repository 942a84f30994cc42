import type { StatementRunner } from '../outbox-database';

/** Runs each statement in order. */
export async function runAll(run: StatementRunner, statements: readonly string[]): Promise<void> {
  for (const sql of statements) await run(sql);
}
