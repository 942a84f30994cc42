import { createHash } from 'node:crypto';
import { OutboxError } from '../../errors/outbox.error';
import { describeError } from '../../internal/describe-error';

/**
 * The name a statement is prepared under on each connection: from its text, so that one name
 * never carries two texts (node-postgres refuses that) whichever table, schema or variant wrote
 * it, and two stores on one table share it.
 */
export function statementName(text: string): string {
  return `nestjs_outbox_${createHash('sha256').update(text).digest('hex').slice(0, 32)}`;
}

/**
 * The failure of a statement sent with `prepare`: when `lost(error)` says the server no longer
 * has (or will not make) the connection's prepared statement, an `OutboxError` whose message
 * (`explain`, given the driver's reason) says how to fix it; any other failure as it was.
 */
export function preparedFailure(
  error: unknown,
  lost: (error: unknown) => boolean,
  explain: (reason: string) => string,
): unknown {
  return lost(error) ? new OutboxError(explain(describeError(error)), { cause: error }) : error;
}
