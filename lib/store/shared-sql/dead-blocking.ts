import type { OutboxQueuePolicy } from '../ports/outbox-store.port';
import { typeLiteral } from './event-type-filter';

/**
 * Which dead rows hold back the later messages of their key, as SQL, for every database: by the
 * module's `ordering.onDeadLetter`, or by the event type's policy where one differs from it.
 * Without such a policy the statements are exactly those the module always ran.
 */

/** `alias.column`, or the bare column where the statement names the table without an alias. */
const column = (alias: string, name: string): string => (alias === '' ? name : `${alias}.${name}`);

/** The types whose dead rows do the opposite of the module's rule, as an SQL list, or undefined. */
function exceptionList(policy: OutboxQueuePolicy): string | undefined {
  const types = policy.deadLetterExceptions ?? [];
  if (types.length === 0) return undefined;
  return `(${types.map(typeLiteral).join(', ')})`;
}

/** Whether a dead row (of `alias`) blocks its key, as an SQL condition. */
export function deadRowBlocks(alias: string, policy: OutboxQueuePolicy): string {
  const list = exceptionList(policy);
  if (list === undefined) return policy.deadBlocksKey ? 'true' : 'false';
  return `${column(alias, 'event_type')} ${policy.deadBlocksKey ? 'NOT IN' : 'IN'} ${list}`;
}

/**
 * The rows (of `alias`) that hold back the later messages of their key: pending and waiting
 * ones, and dead ones that block. `status IN (…)` as ever when no policy differs.
 */
export function blockingCondition(alias: string, policy: OutboxQueuePolicy): string {
  const status = column(alias, 'status');
  const list = exceptionList(policy);
  if (list === undefined) {
    return `${status} IN ${policy.deadBlocksKey ? `('pending', 'waiting', 'dead')` : `('pending', 'waiting')`}`;
  }
  return `(${status} IN ('pending', 'waiting') OR (${status} = 'dead' AND ${deadRowBlocks(alias, policy)}))`;
}

/** Whether any dead row may leave its key free: the module's rule is 'skip', or a type's is. */
export function someDeadSkip(policy: OutboxQueuePolicy): boolean {
  return !policy.deadBlocksKey || (policy.deadLetterExceptions?.length ?? 0) > 0;
}

/**
 * ` AND` the dead row (of `alias`) leaves its key free, where that depends on its type; empty
 * where every dead row follows the module's 'skip' (callers test `someDeadSkip` first).
 */
export function andDeadRowSkips(alias: string, policy: OutboxQueuePolicy): string {
  return (policy.deadLetterExceptions?.length ?? 0) > 0
    ? ` AND NOT (${deadRowBlocks(alias, policy)})`
    : '';
}
