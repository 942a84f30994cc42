import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql } from '../outbox-database';
import { claimCheckTablePart } from '../schema/claim-check-table';
import {
  claimCheckBytes,
  sqlFlag,
  sweptRows,
  type ClaimCheckSql,
  type ClaimCheckSweep,
} from '../shared-sql/claim-check-sql';

// The claim-check table (shared-sql/claim-check-sql.ts) on PostgreSQL.

function createTable(n: OutboxTableNames): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.claimChecksTable} (
  blob_id uuid NOT NULL,
  message_id uuid NOT NULL,
  location varchar(1024) NOT NULL,
  content_type varchar(255) NOT NULL,
  payload_size bigint NOT NULL,
  payload bytea NULL,
  stored_at timestamptz NULL,
  touched_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT ${n.quote(`${n.tableName}_cc_pkey`)} PRIMARY KEY (blob_id)
)`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_cc_touched`)} ON ${n.claimChecksTable} (touched_at)`,
  ];
}

/** Schema step 10: the claim-check table. */
export const postgresClaimCheckTable: SchemaPartSql = claimCheckTablePart(createTable);

function gone(n: OutboxTableNames, sweep: ClaimCheckSweep, alias: string): string {
  const archive = sweep.archive
    ? ` AND NOT EXISTS (SELECT 1 FROM ${n.archiveTable} AS a WHERE a.message_id = ${alias}.message_id)`
    : '';
  return `NOT EXISTS (SELECT 1 FROM ${n.table} AS o WHERE o.message_id = ${alias}.message_id)${archive}`;
}

export const postgresClaimChecks: ClaimCheckSql = {
  async record(run, n, rows) {
    const values: unknown[] = [];
    const tuples = rows.map((row) => {
      const at = values.length;
      values.push(row.blobId, row.messageId, row.location, row.contentType, row.size, row.payload);
      const p = (i: number): string => `$${at + i}`;
      return `(${p(1)}::uuid, ${p(2)}::uuid, ${p(3)}, ${p(4)}, ${p(5)}::bigint, ${p(6)}::bytea, CASE WHEN ${p(6)}::bytea IS NULL THEN NULL ELSE now() END, now())`;
    });
    await run.query(
      `INSERT INTO ${n.claimChecksTable} AS c (blob_id, message_id, location, content_type, payload_size, payload, stored_at, touched_at)
VALUES ${tuples.join(', ')}
ON CONFLICT (blob_id) DO UPDATE SET message_id = EXCLUDED.message_id, touched_at = EXCLUDED.touched_at,
  payload = COALESCE(c.payload, EXCLUDED.payload), stored_at = COALESCE(c.stored_at, EXCLUDED.stored_at)`,
      values,
    );
  },
  async states(run, n, blobIds) {
    const { rows } = await run.query<{ blob_id: string; location: string; stored: unknown }>(
      `SELECT blob_id::text AS blob_id, location, stored_at IS NOT NULL AS stored FROM ${n.claimChecksTable} WHERE blob_id = ANY($1::uuid[])`,
      [blobIds],
    );
    return rows.map((r) => ({
      blobId: r.blob_id,
      location: r.location,
      stored: sqlFlag(r.stored),
    }));
  },
  async markStored(run, n, blobIds) {
    await run.query(
      `UPDATE ${n.claimChecksTable} SET stored_at = now() WHERE blob_id = ANY($1::uuid[]) AND stored_at IS NULL`,
      [blobIds],
    );
  },
  async read(run, n, blobId) {
    const { rows } = await run.query<{ payload: unknown; content_type: string }>(
      `SELECT payload, content_type FROM ${n.claimChecksTable} WHERE blob_id = $1::uuid`,
      [blobId],
    );
    const row = rows[0];
    return row === undefined
      ? undefined
      : { payload: claimCheckBytes(row.payload), contentType: row.content_type };
  },
  sweep(transaction, n, sweep, deleted) {
    // One statement: the rows are locked as they are chosen and their condition read again on
    // their latest version, so a publish that touched one since is never undone.
    return transaction(async (tx) => {
      const { rows } = await tx.query<{ blob_id: string; location: string; external: unknown }>(
        `DELETE FROM ${n.claimChecksTable} AS c WHERE c.blob_id IN (
  SELECT s.blob_id FROM ${n.claimChecksTable} AS s
  WHERE s.touched_at < now() - $1 * interval '1 millisecond' AND ${gone(n, sweep, 's')}
  ORDER BY s.touched_at LIMIT $2 FOR UPDATE SKIP LOCKED)
AND c.touched_at < now() - $1 * interval '1 millisecond' AND ${gone(n, sweep, 'c')}
RETURNING c.blob_id::text AS blob_id, c.location, c.payload IS NULL AS external`,
        [sweep.graceMs, sweep.limit],
      );
      const swept = sweptRows(rows);
      if (swept.length > 0) await deleted(swept);
      return swept;
    });
  },
};
