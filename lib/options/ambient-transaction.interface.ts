import type { EntityManager } from 'typeorm';

/**
 * Supplies the EntityManager of the transaction the current call runs in, when the caller did
 * not pass one to `enqueue()`. See `fromClsTransactionHost()` for `@nestjs-cls/transactional`.
 */
export interface AmbientTransaction {
  /** The manager of the active transaction, or undefined when none is active. */
  currentManager(): EntityManager | undefined;
}
