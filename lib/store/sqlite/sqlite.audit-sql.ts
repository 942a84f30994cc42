import type { AuditSql } from '../shared-sql/audit-sql';

/** The console's audit table on SQLite: `at` is UTC text with milliseconds, as in the outbox table. */
export const SQLITE_CONSOLE_AUDIT_SQL: AuditSql = {
  createTable: (n) => [
    `CREATE TABLE IF NOT EXISTS ${n.table} (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  scope TEXT NOT NULL,
  target TEXT NOT NULL,
  confirmed INTEGER NOT NULL,
  affected INTEGER NOT NULL
)`,
  ],
  dropTable: (n) => [`DROP TABLE IF EXISTS ${n.table}`],
  insert: (n) =>
    `INSERT INTO ${n.table} (actor, action, scope, target, confirmed, affected) VALUES (?, ?, ?, ?, ?, ?)`,
  recent: (n) =>
    `SELECT at, actor, action, scope, target, confirmed, affected FROM ${n.table} ORDER BY id DESC LIMIT ?`,
  recentOf: (n) =>
    `SELECT at, actor, action, scope, target, confirmed, affected FROM ${n.table} WHERE action = ? ORDER BY id DESC LIMIT ?`,
  probe: (n) =>
    `SELECT id, at, actor, action, scope, target, confirmed, affected FROM ${n.table} WHERE 1 = 0`,
};
