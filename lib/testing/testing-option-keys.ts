import type { KnownOptionKeys } from '../internal/did-you-mean';
import { refuseUnknownCallOptions } from '../internal/known-keys';

/**
 * Refuses, with `OutboxOptionsError`, a key of a testing helper's options that the helper does
 * not read: `clearOutbox(ds, { table })` would otherwise clear the default table, a matcher
 * `{ topc }` would match every message, `checkDelivery({ rolledback })` would check no ghost.
 * Said as the module says an unknown option, with the helper's name.
 */
export function refuseUnknownTestingOptions(
  subject: string,
  options: unknown,
  known: KnownOptionKeys,
): void {
  refuseUnknownCallOptions(subject, options, known);
}
