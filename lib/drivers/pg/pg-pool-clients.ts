import type { PgPool } from './pg-client';

/**
 * The clients `pool` connects, when every one of them can be seen: the pool announces each new
 * client with 'connect', so the set is complete only if the pool had none yet. Undefined when it
 * cannot be complete (a pool already in use, or one without events): the pool is then not checked.
 */
export function poolClients(pool: PgPool): WeakSet<object> | undefined {
  // Read structurally: `pg.Pool` is an EventEmitter with `totalCount`, but PgPool does not
  // require either, so a pool-like object without them still works (unchecked).
  const { on, totalCount } = pool as { on?: unknown; totalCount?: unknown };
  if (typeof on !== 'function' || totalCount !== 0) return undefined;
  const clients = new WeakSet<object>();
  (on as (event: string, listener: (client: object) => void) => unknown).call(
    pool,
    'connect',
    (client: object) => clients.add(client),
  );
  return clients;
}
