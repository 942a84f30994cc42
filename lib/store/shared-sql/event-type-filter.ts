import { POLICY_TYPE_PATTERN } from '../../options/resolve-event-policies';
import type { PurgeTypes } from '../ports/outbox-store.port';

/**
 * A policy's event type as an SQL string literal. The pattern leaves out quotes, backslashes and
 * every other character a literal would have to escape, on every database; the type was checked
 * against it at bootstrap, and is again here, since what reaches SQL must not depend on a check
 * made elsewhere.
 */
export function typeLiteral(type: string): string {
  if (!POLICY_TYPE_PATTERN.test(type)) {
    throw new Error(`Event type ${JSON.stringify(type)} cannot be written into SQL`);
  }
  return `'${type}'`;
}

/**
 * ` AND event_type …` for a purge limited by event type (a policy's own retention), or empty.
 * Inlined rather than bound, so the statements' parameters stay those of the plain purge.
 */
export function eventTypeFilter(types: PurgeTypes | undefined): string {
  if (types === undefined) return '';
  if ('only' in types) return ` AND event_type = ${typeLiteral(types.only)}`;
  if (types.except.length === 0) return '';
  return ` AND event_type NOT IN (${types.except.map(typeLiteral).join(', ')})`;
}
