import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import { OutboxMessages } from '../outbox.messages';
import type { SqlPort } from '../store/ports/sql-port';
import { deliveryPartitionsOffer } from '../store/schema/delivery-partitions-offer';

/**
 * Whether a mode left out is the table's choice (`'partitions'` where the table has them) rather
 * than `'leases'`, as in 0.2. `decideClaims` takes it as a parameter for its own tests.
 */
export const CLAIMS_DEFAULT_BY_TABLE = true;

/** Where bootstrap tells why a table it could deliver by partitions leases rows instead. */
export interface ClaimsNotice {
  log(message: string): void;
}

/**
 * How this instance's dispatchers share the table. Given (`dispatcher.claims`, or
 * `publishWindow`), as given: a table that cannot have it is refused by the store's bootstrap
 * checks. Left out, the table decides: partitions where it has them (PostgreSQL, schema step 9
 * whole) and no option needs leases (`tenants.fair`), row leases otherwise. A PostgreSQL table
 * without step 9 leases rows and says once how to add the step, so that an upgrade never fails
 * on the default.
 */
export async function decideClaims(
  options: Pick<
    ResolvedOutboxOptions,
    'dispatcher' | 'tenants' | 'delivery' | 'tableName' | 'schema'
  >,
  sql: SqlPort,
  notice: ClaimsNotice,
  byTable = CLAIMS_DEFAULT_BY_TABLE,
): Promise<'leases' | 'partitions'> {
  const given = options.dispatcher.claims;
  if (given !== null) return given;
  if (!byTable) return 'leases';
  // Delivered outside the app: no dispatcher here claims anything.
  if (options.delivery === 'external') return 'leases';
  if ((options.tenants?.fair ?? null) !== null) return 'leases';
  const offer = await deliveryPartitionsOffer(sql, options);
  if (offer.offered) return 'partitions';
  // Not open yet (bootstrap's own checks wait for it too), or not answering (bootstrap fails
  // next with its own message): leases, which any table can run, and why.
  if (offer.lacking === 'unknown') {
    notice.log(OutboxMessages.claimsUndecided(options.tableName, options.schema ?? undefined));
  }
  if (offer.lacking === 'step') {
    notice.log(
      OutboxMessages.partitionsDefaultWithoutStep(
        options.tableName,
        options.schema ?? undefined,
        offer.reason ?? '',
      ),
    );
  }
  return 'leases';
}
