import type { EntityManager } from 'typeorm';
import type { AmbientTransaction } from '../../options/ambient-transaction.interface';

/**
 * The part of `@nestjs-cls/transactional`'s `TransactionHost` the outbox uses, for any adapter:
 * `Tx` is what the adapter's `tx` is inside a transaction (an `EntityManager` with
 * `TransactionalAdapterTypeOrm`, the interactive-transaction client with
 * `TransactionalAdapterPrisma`, the Drizzle `tx` with `TransactionalAdapterDrizzleOrm`).
 */
export interface ClsTransactionHostLike<Tx = EntityManager> {
  isTransactionActive(): boolean;
  readonly tx: Tx;
}

/**
 * Lets `enqueue()` join the ambient transaction of `@nestjs-cls/transactional`, so
 * `@Transactional()` methods need not pass a transaction. Works with the adapter that matches the
 * module's connection: TypeORM with `dataSource`, Prisma with `prismaOutbox(prisma)`, Drizzle with
 * `drizzleOutbox(db)`. Outside a transaction it supplies nothing, so `enqueue()` throws
 * `OutboxTransactionRequiredError` (the adapter's `tx` would be the client itself there, whose
 * statements commit one by one).
 *
 * @example
 * OutboxModule.forRootAsync({
 *   inject: [DataSource, TransactionHost],
 *   useFactory: (dataSource, txHost) => ({ dataSource, publisher, ambientTransaction: fromClsTransactionHost(txHost) }),
 * })
 */
export function fromClsTransactionHost<Tx = EntityManager>(
  host: ClsTransactionHostLike<Tx>,
): AmbientTransaction<Tx> {
  return {
    currentManager: () => (host.isTransactionActive() ? host.tx : undefined),
  };
}
