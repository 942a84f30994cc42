import { OutboxBridgeError } from '../../errors/outbox-bridge.error';
import { OutboxMessages } from '../../outbox.messages';
import { guardTransaction, releaseTransaction, writesOf } from './transaction-writes';

/**
 * The options an `@nestjs-cls/transactional` adapter's `optionsFactory` returns, as far as the
 * guard needs them (methods, so any adapter's own parameter types fit).
 */
export interface TransactionalAdapterOptionsLike {
  wrapWithTransaction(options: never, fn: never, setTx: never): Promise<unknown>;
  wrapWithNestedTransaction?(options: never, fn: never, setTx: never, tx: never): Promise<unknown>;
}

/** An `@nestjs-cls/transactional` adapter (`TransactionalAdapterPrisma`, `…TypeOrm`, …). */
export interface TransactionalAdapterLike {
  optionsFactory(connection: never, extraProviders: never): TransactionalAdapterOptionsLike;
}

type Work = (...args: unknown[]) => Promise<unknown>;
type SetTx = (tx?: unknown) => void;
interface AdapterOptions {
  wrapWithTransaction(options: unknown, fn: Work, setTx: SetTx): Promise<unknown>;
  wrapWithNestedTransaction?(
    options: unknown,
    fn: Work,
    setTx: SetTx,
    tx: unknown,
  ): Promise<unknown>;
}

/**
 * Wraps an `@nestjs-cls/transactional` adapter so that no event-bus bridge write can escape its
 * transaction: when a transaction's callback ends, every write the bridges (`nestjs-outbox/cqrs`,
 * `nestjs-outbox/event-emitter`) started in it is waited for, and if one was still running (a
 * `publish` that was not awaited) or failed, the transaction rolls back with `OutboxBridgeError`
 * instead of committing without its message. The bridges refuse to write in a transaction whose
 * adapter is not wrapped.
 *
 * @example
 * new ClsPluginTransactional({
 *   adapter: guardOutboxWrites(new TransactionalAdapterPrisma({ prismaInjectionToken: PrismaClient })),
 * })
 */
export function guardOutboxWrites<A extends TransactionalAdapterLike>(adapter: A): A {
  // A prototype-linked copy keeps the adapter's token, defaults and lifecycle hooks as they are.
  const guarded = Object.create(adapter) as A;
  const factory = adapter.optionsFactory.bind(adapter) as unknown as (
    connection: unknown,
    extraProviders: unknown,
  ) => AdapterOptions;
  const optionsFactory = (connection: unknown, extraProviders: unknown): AdapterOptions => {
    const inner = factory(connection, extraProviders);
    const nested = inner.wrapWithNestedTransaction?.bind(inner);
    return {
      ...inner,
      wrapWithTransaction: (options, fn, setTx) => {
        const current = new CurrentTx(undefined, setTx);
        return inner
          .wrapWithTransaction(options, guardedWork(fn, current), current.set)
          .finally(() => releaseTransaction(current.tx));
      },
      // Only where the adapter has one: the host tells nested support by it.
      ...(nested === undefined
        ? {}
        : {
            wrapWithNestedTransaction: (
              options: unknown,
              fn: Work,
              setTx: SetTx,
              parent: unknown,
            ) => {
              const current = new CurrentTx(parent, setTx);
              return nested(options, guardedWork(fn, current), current.set, parent);
            },
          }),
    };
  };
  Object.defineProperty(guarded, 'optionsFactory', { value: optionsFactory, enumerable: true });
  return guarded;
}

/** The transaction handle the adapter set for one (possibly nested) transaction, guarded. */
class CurrentTx {
  constructor(
    public tx: unknown,
    private readonly setTx: SetTx,
  ) {}

  readonly set: SetTx = (client) => {
    if (client !== undefined) {
      this.tx = client;
      guardTransaction(client);
    }
    this.setTx(client);
  };
}

/** `fn`, then the check of the writes it left in its transaction. */
function guardedWork(fn: Work, current: CurrentTx): Work {
  return async (...args) => {
    let result: unknown;
    try {
      result = await fn(...args);
    } catch (error) {
      // Rolling back anyway; wait so that no write reaches the connection after the rollback.
      await writesOf(current.tx)?.settle();
      throw error;
    }
    const writes = writesOf(current.tx);
    if (writes === undefined) return result;
    const { unsettled, failed, failure } = await writes.settle();
    if (unsettled > 0) {
      throw new OutboxBridgeError(
        OutboxMessages.bridgeWriteUnsettled(unsettled),
        'unsettled-write',
        {
          cause: failure,
        },
      );
    }
    if (failed) {
      throw new OutboxBridgeError(OutboxMessages.bridgeWriteFailed(), 'failed-write', {
        cause: failure,
      });
    }
    return result;
  };
}
