import { Logger } from '@nestjs/common';
import { describeError } from '../../internal/describe-error';
import type { PgPool } from './pg-client';

/**
 * The pools already heard: one listener per pool, however many outbox instances (or ports) share
 * it; one each would reach Node's MaxListenersExceededWarning. Weak, so a pool ended and dropped
 * by the app is not kept.
 */
const heard = new WeakSet<object>();

/**
 * Hears the errors a node-postgres pool emits for its idle clients. When the server ends an idle
 * connection (a failover, pg_terminate_backend, a proxy's idle timeout), `pg.Pool` drops the
 * client and emits 'error' on itself; with no listener that ends the process, dispatcher and all.
 * The outbox's own clients go back to this pool between transactions, so the pool is heard here:
 * the loss is logged and the pool opens a new connection at the next checkout. A listener of the
 * app's own is called as well.
 */
export function hearIdleClientErrors(pool: PgPool): void {
  const on = (pool as { on?: unknown }).on;
  if (typeof on !== 'function' || heard.has(pool)) return;
  heard.add(pool);
  const logger = new Logger('OutboxStore');
  (on as (event: string, listener: (error: unknown) => void) => unknown).call(
    pool,
    'error',
    (error: unknown) =>
      logger.warn(
        `An idle connection of the node-postgres pool was lost (the pool opens a new one): ${describeError(error)}`,
      ),
  );
}
