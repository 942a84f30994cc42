import type { EntityManager } from 'typeorm';
import type { AmbientTransaction } from '../../options/ambient-transaction.interface';

/** The part of `@nestjs-cls/transactional`'s `TransactionHost` (TypeORM adapter) the outbox uses. */
export interface ClsTransactionHostLike {
  isTransactionActive(): boolean;
  readonly tx: EntityManager;
}

/**
 * Lets `enqueue()` join the ambient transaction of `@nestjs-cls/transactional` (with
 * `TransactionalAdapterTypeOrm`), so `@Transactional()` methods need not pass a manager.
 *
 * @example
 * OutboxModule.forRootAsync({
 *   inject: [DataSource, TransactionHost],
 *   useFactory: (dataSource, txHost) => ({ dataSource, publisher, ambientTransaction: fromClsTransactionHost(txHost) }),
 * })
 */
export function fromClsTransactionHost(host: ClsTransactionHostLike): AmbientTransaction {
  return {
    currentManager: () => (host.isTransactionActive() ? host.tx : undefined),
  };
}
