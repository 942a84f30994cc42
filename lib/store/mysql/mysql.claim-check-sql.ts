import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaPartSql } from '../outbox-database';
import { claimCheckTablePart } from '../schema/claim-check-table';
import {
  positionalClaimCheckReads,
  sweptRows,
  type ClaimCheckSql,
  type ClaimCheckSweep,
} from '../shared-sql/claim-check-sql';

// The claim-check table (shared-sql/claim-check-sql.ts) on MySQL 8 and MariaDB 10.6+. Its ids
// are text whatever the outbox's layout: compared with the outbox's through `outboxId`.

const NOW = 'UTC_TIMESTAMP(6)';
const ID = 'CHAR(36) CHARACTER SET ascii';

function createTable(n: OutboxTableNames): string {
  return `CREATE TABLE IF NOT EXISTS ${n.claimChecksTable} (
  blob_id ${ID} NOT NULL,
  message_id ${ID} NOT NULL,
  location VARCHAR(1024) NOT NULL,
  content_type VARCHAR(255) NOT NULL,
  payload_size BIGINT NOT NULL,
  payload LONGBLOB NULL,
  stored_at DATETIME(6) NULL,
  touched_at DATETIME(6) NOT NULL DEFAULT (${NOW}),
  PRIMARY KEY (blob_id),
  KEY ${n.quote(`${n.tableName}_cc_touched`)} (touched_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`;
}

/** Schema step 10: the claim-check table. */
export const mysqlClaimCheckTable: SchemaPartSql = claimCheckTablePart((n) => [createTable(n)]);

/** The outbox's id for a text id of this table, in the outbox's layout (its index then serves). */
function outboxId(column: string, sweep: ClaimCheckSweep): string {
  return sweep.layout === 'binary' ? `UNHEX(REPLACE(${column}, '-', ''))` : column;
}

function gone(n: OutboxTableNames, sweep: ClaimCheckSweep, alias: string): string {
  const id = outboxId(`${alias}.message_id`, sweep);
  const archive = sweep.archive
    ? ` AND NOT EXISTS (SELECT 1 FROM ${n.archiveTable} AS a WHERE a.message_id = ${id})`
    : '';
  return `NOT EXISTS (SELECT 1 FROM ${n.table} AS o WHERE o.message_id = ${id})${archive}`;
}

const list = (count: number): string => Array.from({ length: count }, () => '?').join(', ');

export const mysqlClaimChecks: ClaimCheckSql = {
  async record(run, n, rows) {
    const values = rows.flatMap((row) => [
      row.blobId,
      row.messageId,
      row.location,
      row.contentType,
      row.size,
      row.payload,
      row.payload !== null,
    ]);
    const tuple = `(?, ?, ?, ?, ?, ?, CASE WHEN ? THEN ${NOW} ELSE NULL END, ${NOW})`;
    await run.query(
      `INSERT INTO ${n.claimChecksTable} (blob_id, message_id, location, content_type, payload_size, payload, stored_at, touched_at)
VALUES ${rows.map(() => tuple).join(', ')}
ON DUPLICATE KEY UPDATE message_id = VALUES(message_id), touched_at = VALUES(touched_at),
  payload = COALESCE(payload, VALUES(payload)), stored_at = COALESCE(stored_at, VALUES(stored_at))`,
      values,
    );
  },
  ...positionalClaimCheckReads(NOW),
  sweep(transaction, n, sweep, deleted) {
    // A locking read sees each row's latest version: a publish that touched a row since the
    // sweep began keeps it. The rows stay locked until they are deleted.
    return transaction(async (tx) => {
      const { rows } = await tx.query<{ blob_id: string; location: string; external: unknown }>(
        `SELECT c.blob_id, c.location, c.payload IS NULL AS external FROM ${n.claimChecksTable} AS c
WHERE c.touched_at < ${NOW} - INTERVAL ? * 1000 MICROSECOND AND ${gone(n, sweep, 'c')}
ORDER BY c.touched_at LIMIT ? FOR UPDATE SKIP LOCKED`,
        [sweep.graceMs, sweep.limit],
      );
      if (rows.length === 0) return [];
      await tx.query(
        `DELETE FROM ${n.claimChecksTable} WHERE blob_id IN (${list(rows.length)})`,
        rows.map((r) => r.blob_id),
      );
      const swept = sweptRows(rows);
      await deleted(swept);
      return swept;
    });
  },
};
