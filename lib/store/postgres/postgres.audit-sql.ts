import type { AuditSql } from '../shared-sql/audit-sql';

/** The console's audit table on PostgreSQL: one row per action, written on the database clock. */
export const POSTGRES_CONSOLE_AUDIT_SQL: AuditSql = {
  createTable: (n) => [
    `CREATE TABLE IF NOT EXISTS ${n.table} (
  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at TIMESTAMPTZ NOT NULL DEFAULT now(),
  actor VARCHAR(200) NOT NULL,
  action VARCHAR(16) NOT NULL,
  scope VARCHAR(16) NOT NULL,
  target VARCHAR(2000) NOT NULL,
  confirmed INTEGER NOT NULL,
  affected INTEGER NOT NULL
)`,
  ],
  dropTable: (n) => [`DROP TABLE IF EXISTS ${n.table}`],
  insert: (n) =>
    `INSERT INTO ${n.table} (actor, action, scope, target, confirmed, affected) VALUES ($1, $2, $3, $4, $5, $6)`,
  recent: (n) =>
    `SELECT at, actor, action, scope, target, confirmed, affected FROM ${n.table} ORDER BY id DESC LIMIT $1`,
  recentOf: (n) =>
    `SELECT at, actor, action, scope, target, confirmed, affected FROM ${n.table} WHERE action = $1 ORDER BY id DESC LIMIT $2`,
  probe: (n) =>
    `SELECT id, at, actor, action, scope, target, confirmed, affected FROM ${n.table} WHERE 1 = 0`,
};
