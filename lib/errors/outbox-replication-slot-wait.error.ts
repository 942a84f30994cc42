import { inspect } from 'node:util';
import { OutboxError } from './outbox.error';

/** A session whose open write transaction a new logical replication slot waits for. */
export interface OutboxSlotBlocker {
  /** The server process (`pg_stat_activity.pid`): `SELECT pg_terminate_backend(pid)` ends it. */
  readonly pid: number;
  /** When its transaction began (ISO text), when the server shows it. */
  readonly transactionStart: string | null;
  readonly user: string | null;
  readonly database: string | null;
  readonly applicationName: string | null;
  /** `active`, `idle in transaction`, …; null when the server does not show it to this role. */
  readonly state: string | null;
}

/**
 * Thrown when making a PostgreSQL logical replication slot (log tailing's first start, or
 * `outbox log setup`) waited its bound for the write transactions open on the server: PostgreSQL
 * makes a logical slot only once every transaction that was writing when it began has ended.
 * `blockers` are the oldest of them (an `idle in transaction` session left open elsewhere is the
 * usual one); end them, or make the slot ahead with `outbox log setup`.
 */
export class OutboxReplicationSlotWaitError extends OutboxError {
  constructor(
    message: string,
    /** The slot that could not be made. */
    readonly slot: string,
    /** How long it waited (ms). */
    readonly waitedMs: number,
    /** The oldest sessions with an open write transaction, oldest first (at most five). */
    readonly blockers: readonly OutboxSlotBlocker[],
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  /** One line when printed (Nest logs bootstrap errors with `util.inspect`). */
  [inspect.custom](): string {
    return `${this.name}: ${this.message}`;
  }
}
