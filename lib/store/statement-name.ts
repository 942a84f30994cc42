import { createHash } from 'node:crypto';

/**
 * The name a statement is prepared under on each connection: from its text, so that one name
 * never carries two texts (node-postgres refuses that) whichever table, schema or variant wrote
 * it, and two stores on one table share it.
 */
export function statementName(text: string): string {
  return `nestjs_outbox_${createHash('sha256').update(text).digest('hex').slice(0, 32)}`;
}
