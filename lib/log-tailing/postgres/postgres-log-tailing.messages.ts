import type { OutboxSlotBlocker } from '../../errors/outbox-replication-slot-wait.error';

/**
 * The text of the PostgreSQL log source's lines and refusals (kept beside the source, as the
 * MySQL/MariaDB reader's are, while log tailing is an entry point of its own).
 */
export const PostgresLogTailingMessages = {
  makingSlot: (slot: string, waitMs: number): string =>
    `Making replication slot ${slot}: PostgreSQL first waits for every write transaction open on the server to end (up to ${waitMs} ms; "outbox log setup" makes the slot ahead of a deploy)`,
  slotWait: (slot: string, waitMs: number, blockers: readonly OutboxSlotBlocker[]): string => {
    const [oldest, ...others] = blockers;
    const who =
      oldest === undefined
        ? "no open write transaction this role can see (another role's sessions show theirs only to a role with pg_read_all_stats; prepared transactions count too: SELECT * FROM pg_prepared_xacts)"
        : `the oldest is pid ${oldest.pid === 0 ? `0 (${oldest.applicationName ?? 'a prepared transaction'})` : oldest.pid}${describeBlocker(oldest)}${others.length === 0 ? '' : `; then pid ${others.map((b) => b.pid).join(', pid ')}`}`;
    return `Making replication slot ${slot} waited ${waitMs} ms for the write transactions open on the server, and ${who}. End or commit it (SELECT pg_terminate_backend(<pid>); for a prepared transaction COMMIT PREPARED or ROLLBACK PREPARED '<gid>'), set idle_in_transaction_session_timeout, or make the slot ahead of the deploy with "outbox log setup" (it waits the same way). logTailing({ createSlotTimeoutMs }) sets the wait.`;
  },
  slotLost: (slot: string, reason: string): string =>
    `Replication slot ${slot} was ${reason}; made it again. What was committed while it was gone is pending in the table, and the sweep (sweepIntervalMs) delivers it; the log brings what commits from now on`,
  slotNotRemade: (slot: string, reason: string, cause: string): string =>
    `Replication slot ${slot} was ${reason} and could not be made again (${cause}); the sweep (sweepIntervalMs) delivers meanwhile, and the reader tries again`,
  readFailed: (slot: string, retryMs: number, cause: string): string =>
    `Reading replication slot ${slot} failed, reconnecting in ${retryMs} ms: ${cause}`,
  readerLost: (slot: string, why: string): string =>
    `Lost replication slot ${slot}: ${why}. Stopped reading; this process stands by and asks for the slot again`,
  repeated: (line: string, times: number): string =>
    `${line} (${times} more like it since the last such line)`,
} as const;

function describeBlocker(b: OutboxSlotBlocker): string {
  const parts = [
    b.state === null ? undefined : b.state,
    b.transactionStart === null ? undefined : `transaction since ${b.transactionStart}`,
    b.user === null ? undefined : `user ${b.user}`,
    b.database === null ? undefined : `database ${b.database}`,
    b.applicationName === null || b.applicationName === '' || b.pid === 0
      ? undefined
      : `application ${b.applicationName}`,
  ].filter((p): p is string => p !== undefined);
  return parts.length === 0 ? '' : ` (${parts.join(', ')})`;
}
