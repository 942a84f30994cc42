import type { OutboxTableNames } from '../../internal/sql-identifier';
import type {
  ClaimCheckEntry,
  ClaimCheckState,
} from '../../publishers/claim-check/claim-check-ledger.port';
import type { MessageIdLayout } from '../rows/message-id-codec';
import type { SqlRunner } from '../ports/sql-port';

/**
 * The claim-check table `<table>_claim_checks` (schema step 10, docs/claim-check.md): one row per
 * payload sent by reference, under its blob id (the message id of the message first enqueued
 * with it, carried by its re-drive copies in `x-outbox-claim-check-id`). `message_id` is the last
 * message that sent it, so a payload lives as long as the last of them; `location` where the
 * store keeps it (`payload` holds the bytes when the table itself is the store); `stored_at` is
 * set once the store confirmed the write, so a retry or a copy never writes it again.
 *
 * Ids are kept as text on MySQL/MariaDB whatever the outbox's layout (a later conversion of the
 * outbox's ids leaves this table as it is), and compared through `outboxIdOf`.
 */
export type ClaimCheckRowInput = ClaimCheckEntry;

/** A row as the publisher reads it back after recording. */
export type ClaimCheckRowState = ClaimCheckState;

/** A row the sweep deleted: its payload is to be deleted from an external store. */
export interface SweptClaimCheck {
  readonly blobId: string;
  readonly location: string;
  /** False when the table held the bytes itself: deleting the row deleted them. */
  readonly external: boolean;
}

/** Where the sweep looks for the messages that still send a payload. */
export interface ClaimCheckSweep {
  /** Rows untouched for this long only (a publish that touched one is over by then). */
  readonly graceMs: number;
  readonly limit: number;
  /** Whether `<table>_archive` keeps messages too (`cleaner.archive`). */
  readonly archive: boolean;
  /** How the outbox table stores its message ids (MySQL/MariaDB). */
  readonly layout: MessageIdLayout;
}

/** The claim-check statements of one database. */
export interface ClaimCheckSql {
  /** Inserts or touches the rows (distinct blob ids); the last message is the payload's owner. */
  record(run: SqlRunner, n: OutboxTableNames, rows: readonly ClaimCheckRowInput[]): Promise<void>;
  /** The rows of these blob ids. */
  states(
    run: SqlRunner,
    n: OutboxTableNames,
    blobIds: readonly string[],
  ): Promise<ClaimCheckRowState[]>;
  /** Marks these blob ids written to their store. */
  markStored(run: SqlRunner, n: OutboxTableNames, blobIds: readonly string[]): Promise<void>;
  /** The bytes and content type the table holds for a blob id. */
  read(
    run: SqlRunner,
    n: OutboxTableNames,
    blobId: string,
  ): Promise<{ payload: Buffer | null; contentType: string } | undefined>;
  /**
   * Deletes up to `limit` rows whose last message is gone from the outbox (and the archive),
   * checked again under each row's lock, and hands them to `deleted` before the transaction
   * commits: their external payloads are deleted there, and a failure there keeps the rows. A
   * publish of one of them waits for the commit, and then records it anew at a new location.
   */
  sweep(
    transaction: <T>(work: (tx: SqlRunner) => Promise<T>) => Promise<T>,
    n: OutboxTableNames,
    sweep: ClaimCheckSweep,
    deleted: (rows: readonly SweptClaimCheck[]) => Promise<void>,
  ): Promise<SweptClaimCheck[]>;
}

/** The bytes of a `bytea` / BLOB column as drivers return them. */
export function claimCheckBytes(value: unknown): Buffer | null {
  if (value === null || value === undefined) return null;
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof Uint8Array)
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  if (ArrayBuffer.isView(value)) {
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  }
  if (Object.prototype.toString.call(value) === '[object ArrayBuffer]') {
    return Buffer.from(value as ArrayBuffer);
  }
  throw new TypeError('the claim-check table returned a payload that is not bytes');
}

/** A boolean as drivers return it (PostgreSQL true, MySQL/SQLite 1). */
export function sqlFlag(value: unknown): boolean {
  return value === true || value === 1 || value === '1' || value === 't';
}

/**
 * The statements MySQL/MariaDB and SQLite share (`?` placeholders, ids as text), with the
 * database's clock `now`.
 */
export function positionalClaimCheckReads(
  now: string,
): Pick<ClaimCheckSql, 'states' | 'markStored' | 'read'> {
  const list = (count: number): string => Array.from({ length: count }, () => '?').join(', ');
  return {
    async states(run, n, blobIds) {
      const { rows } = await run.query<{ blob_id: string; location: string; stored: unknown }>(
        `SELECT blob_id, location, stored_at IS NOT NULL AS stored FROM ${n.claimChecksTable} WHERE blob_id IN (${list(blobIds.length)})`,
        [...blobIds],
      );
      return rows.map((r) => ({
        blobId: r.blob_id,
        location: r.location,
        stored: sqlFlag(r.stored),
      }));
    },
    async markStored(run, n, blobIds) {
      await run.query(
        `UPDATE ${n.claimChecksTable} SET stored_at = ${now} WHERE blob_id IN (${list(blobIds.length)}) AND stored_at IS NULL`,
        [...blobIds],
      );
    },
    async read(run, n, blobId) {
      const { rows } = await run.query<{ payload: unknown; content_type: string }>(
        `SELECT payload, content_type FROM ${n.claimChecksTable} WHERE blob_id = ?`,
        [blobId],
      );
      const row = rows[0];
      return row === undefined
        ? undefined
        : { payload: claimCheckBytes(row.payload), contentType: row.content_type };
    },
  };
}

/** Rows the sweep deleted, as drivers answer them. */
export function sweptRows(
  rows: readonly { blob_id: string; location: string; external: unknown }[],
): SweptClaimCheck[] {
  return rows.map((r) => ({
    blobId: r.blob_id,
    location: r.location,
    external: sqlFlag(r.external),
  }));
}
