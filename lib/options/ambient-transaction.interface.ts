import type { EntityManager } from 'typeorm';

/**
 * Supplies the transaction the current call runs in, when the caller did not pass one to
 * `enqueue()`: an EntityManager on TypeORM (the default `Tx`), or what the module's `connection`
 * joins. See `fromClsTransactionHost()` for `@nestjs-cls/transactional`.
 */
export interface AmbientTransaction<Tx = EntityManager> {
  /** The active transaction (its manager or client), or undefined when none is active. */
  currentManager(): Tx | undefined;
  /**
   * The tenant of the current call, for messages that name none, with the module's `tenants`
   * option on; asked after `tenants.resolve`. @default none
   */
  currentTenant?(): string | undefined;
}
