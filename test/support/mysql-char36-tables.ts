import type { SqlPort } from '../../lib/testing';
import { createOutboxTable } from '../../lib/store/schema/outbox-table-ddl';
import { OUTBOX_STEP_OPTIONS } from '../../lib/store/schema/schema-steps';

// The MySQL/MariaDB outbox tables as they were made before binary message ids: message_id
// CHAR(36) CHARACTER SET ascii in the outbox table, its attempt history and its archive. Kept
// as written then (not derived from today's DDL), so that the tests prove the store and the
// conversion on the tables apps really have.

/** The three tables of `table` with CHAR(36) ids, as the DDL of 0.2/early 0.3 wrote them. */
export function char36TableDdl(table: string): string[] {
  return [
    `CREATE TABLE \`${table}\` (
  id BIGINT NOT NULL AUTO_INCREMENT,
  message_id CHAR(36) CHARACTER SET ascii NOT NULL,
  topic VARCHAR(255) NOT NULL,
  message_key VARCHAR(255) NULL,
  event_type VARCHAR(255) NOT NULL,
  payload LONGTEXT NOT NULL,
  headers TEXT NOT NULL,
  status VARCHAR(16) CHARACTER SET ascii NOT NULL DEFAULT 'pending',
  attempts INT NOT NULL DEFAULT 0,
  available_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  locked_by VARCHAR(128) NULL,
  lock_token CHAR(36) CHARACTER SET ascii NULL,
  locked_until DATETIME(6) NULL,
  last_error TEXT NULL,
  last_attempt_at DATETIME(6) NULL,
  created_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  delivered_at DATETIME(6) NULL,
  dead_at DATETIME(6) NULL,
  payload_encoding VARCHAR(16) NOT NULL DEFAULT 'json',
  content_type VARCHAR(255) NULL,
  payload_bytes LONGBLOB NULL,
  broker_attributes TEXT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY \`${table}_message_id_key\` (message_id),
  KEY \`${table}_pending_idx\` (status, available_at, id),
  KEY \`${table}_key_idx\` (message_key, status, id),
  KEY \`${table}_done_idx\` (status, delivered_at, dead_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    `CREATE TABLE \`${table}_attempts\` (
  id BIGINT NOT NULL AUTO_INCREMENT,
  message_id CHAR(36) CHARACTER SET ascii NOT NULL,
  attempt INT NOT NULL,
  outcome VARCHAR(16) CHARACTER SET ascii NOT NULL,
  locked_by VARCHAR(128) NULL,
  error_class VARCHAR(128) NULL,
  error TEXT NULL,
  failed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  PRIMARY KEY (id),
  KEY \`${table}_attempts_msg\` (message_id, id),
  CHECK (outcome IN ('retry', 'dead', 'outage'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    `CREATE TABLE \`${table}_archive\` (
  archive_id BIGINT NOT NULL AUTO_INCREMENT,
  outbox_id BIGINT NOT NULL,
  message_id CHAR(36) CHARACTER SET ascii NOT NULL,
  topic VARCHAR(255) NOT NULL,
  message_key VARCHAR(255) NULL,
  event_type VARCHAR(255) NOT NULL,
  payload LONGTEXT NOT NULL,
  headers TEXT NOT NULL,
  status VARCHAR(16) CHARACTER SET ascii NOT NULL,
  attempts INT NOT NULL,
  last_error TEXT NULL,
  last_attempt_at DATETIME(6) NULL,
  created_at DATETIME(6) NOT NULL,
  delivered_at DATETIME(6) NULL,
  dead_at DATETIME(6) NULL,
  payload_encoding VARCHAR(16) NOT NULL DEFAULT 'json',
  content_type VARCHAR(255) NULL,
  payload_bytes LONGBLOB NULL,
  broker_attributes TEXT NULL,
  archived_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  PRIMARY KEY (archive_id),
  KEY \`${table}_archive_msg\` (message_id),
  KEY \`${table}_archive_at\` (archived_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  ];
}

/**
 * Makes the CHAR(36) tables of `table`, then lets `createOutboxTable` bring them up to date as
 * an upgrade would (the key-lock table, NO PAD collations): the ids stay CHAR(36).
 */
export async function createChar36Tables(sql: SqlPort, table: string): Promise<void> {
  for (const statement of char36TableDdl(table)) await sql.query(statement);
  await createOutboxTable(sql, { tableName: table, with: OUTBOX_STEP_OPTIONS });
}

/** `message_id`'s column type in each table of `table` that has one, e.g. `binary(16)`. */
export async function idColumnTypes(sql: SqlPort, table: string): Promise<Record<string, string>> {
  const { rows } = await sql.query<{ t: string; type: string }>(
    `SELECT TABLE_NAME AS t, COLUMN_TYPE AS type FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND COLUMN_NAME = 'message_id' AND TABLE_NAME IN (?, ?, ?, ?)`,
    [table, `${table}_attempts`, `${table}_archive`, `${table}_ids`],
  );
  return Object.fromEntries(rows.map((r) => [String(r.t), String(r.type).toLowerCase()]));
}
