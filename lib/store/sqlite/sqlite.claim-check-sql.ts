import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql } from '../outbox-database';
import { claimCheckTablePart } from '../schema/claim-check-table';
import {
  positionalClaimCheckReads,
  sweptRows,
  type ClaimCheckSql,
  type ClaimCheckSweep,
} from '../shared-sql/claim-check-sql';

// The claim-check table (shared-sql/claim-check-sql.ts) on SQLite, whose one writer runs the
// sweep's choice and delete as one statement with nothing between them.

const NOW = `strftime('%Y-%m-%d %H:%M:%f', 'now')`;

function createTable(n: OutboxTableNames): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${n.claimChecksTable} (
  blob_id TEXT NOT NULL PRIMARY KEY,
  message_id TEXT NOT NULL,
  location TEXT NOT NULL,
  content_type TEXT NOT NULL,
  payload_size INTEGER NOT NULL,
  payload BLOB NULL,
  stored_at TEXT NULL,
  touched_at TEXT NOT NULL DEFAULT (${NOW})
)`,
    `CREATE INDEX IF NOT EXISTS ${n.quote(`${n.tableName}_cc_touched`)} ON ${n.claimChecksTable} (touched_at)`,
  ];
}

/** Schema step 10: the claim-check table. */
export const sqliteClaimCheckTable: SchemaPartSql = claimCheckTablePart(createTable);

function gone(n: OutboxTableNames, sweep: ClaimCheckSweep, alias: string): string {
  const archive = sweep.archive
    ? ` AND NOT EXISTS (SELECT 1 FROM ${n.archiveTable} AS a WHERE a.message_id = ${alias}.message_id)`
    : '';
  return `NOT EXISTS (SELECT 1 FROM ${n.table} AS o WHERE o.message_id = ${alias}.message_id)${archive}`;
}

export const sqliteClaimChecks: ClaimCheckSql = {
  async record(run, n, rows) {
    const values = rows.flatMap((row) => [
      row.blobId,
      row.messageId,
      row.location,
      row.contentType,
      row.size,
      row.payload,
      row.payload === null ? 0 : 1,
    ]);
    const tuple = `(?, ?, ?, ?, ?, ?, CASE WHEN ? THEN ${NOW} ELSE NULL END, ${NOW})`;
    await run.query(
      `INSERT INTO ${n.claimChecksTable} (blob_id, message_id, location, content_type, payload_size, payload, stored_at, touched_at)
VALUES ${rows.map(() => tuple).join(', ')}
ON CONFLICT (blob_id) DO UPDATE SET message_id = excluded.message_id, touched_at = excluded.touched_at,
  payload = COALESCE(payload, excluded.payload), stored_at = COALESCE(stored_at, excluded.stored_at)`,
      values,
    );
  },
  ...positionalClaimCheckReads(NOW),
  sweep(transaction, n, sweep, deleted) {
    const cutoff = `strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (? / 1000.0) || ' seconds')`;
    return transaction(async (tx) => {
      const { rows } = await tx.query<{ blob_id: string; location: string; external: unknown }>(
        `DELETE FROM ${n.claimChecksTable} WHERE blob_id IN (
  SELECT c.blob_id FROM ${n.claimChecksTable} AS c
  WHERE c.touched_at < ${cutoff} AND ${gone(n, sweep, 'c')}
  ORDER BY c.touched_at LIMIT ?)
RETURNING blob_id, location, payload IS NULL AS external`,
        [sweep.graceMs, sweep.limit],
      );
      const swept = sweptRows(rows);
      if (swept.length > 0) await deleted(swept);
      return swept;
    });
  },
};
