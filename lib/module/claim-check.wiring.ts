import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import { ClaimCheckPublisher } from '../publishers/claim-check/claim-check.publisher';
import { claimCheckLedger } from '../store/claim-check-ledger';
import type { SqlPort } from '../store/ports/sql-port';

/**
 * The options as the instance's parts use them with the claim check on: its publisher sends
 * what was marked at enqueue by reference (`ClaimCheckPublisher` around the app's publisher).
 */
export function withClaimCheckPublisher(options: ResolvedOutboxOptions): ResolvedOutboxOptions {
  const { claimCheck, publisher } = options;
  if (claimCheck === null || publisher === undefined) return options;
  return {
    ...options,
    publisher: new ClaimCheckPublisher(publisher, claimCheck.store, claimCheck.ledger),
  };
}

/** Hands the instance's claim-check table to its publisher and cleaner, once its port is known. */
export function attachClaimCheckLedger(options: ResolvedOutboxOptions, sql: SqlPort): void {
  options.claimCheck?.ledger.attach(
    claimCheckLedger(sql, {
      tableName: options.tableName,
      schema: options.schema,
      archive: options.cleaner.archive,
    }),
  );
}
