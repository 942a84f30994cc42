import type { BareRelayChildConfig } from './bare-relay-process';
import { forkTs, type Child } from './child';

/** The bare relay's look again at an empty table (L2's latency reference, L3's baseline). */
export const BARE_IDLE_MS = 2;

/** The bare pipelined relay in a process of its own on `table`, publishing to `queue`. */
export function forkBareRelay(
  database: BareRelayChildConfig['database'],
  table: string,
  queue: string,
): Child {
  return forkTs('../support/bare-relay-process.ts', {
    database,
    table,
    queue,
    idleMs: BARE_IDLE_MS,
  } satisfies BareRelayChildConfig);
}
