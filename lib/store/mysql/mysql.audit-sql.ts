import type { AuditSql } from '../shared-sql/audit-sql';

/**
 * The console's audit table on MySQL 8 / MariaDB 10.6+. `at` is UTC (written with
 * UTC_TIMESTAMP, read as text), whatever the session's time zone.
 */
export const MYSQL_CONSOLE_AUDIT_SQL: AuditSql = {
  createTable: (n) => [
    `CREATE TABLE IF NOT EXISTS ${n.table} (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  at DATETIME(3) NOT NULL,
  actor VARCHAR(200) NOT NULL,
  action VARCHAR(16) NOT NULL,
  scope VARCHAR(16) NOT NULL,
  target VARCHAR(2000) NOT NULL,
  confirmed INT NOT NULL,
  affected INT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
  ],
  dropTable: (n) => [`DROP TABLE IF EXISTS ${n.table}`],
  insert: (n) =>
    `INSERT INTO ${n.table} (at, actor, action, scope, target, confirmed, affected) VALUES (UTC_TIMESTAMP(3), ?, ?, ?, ?, ?, ?)`,
  recent: (n) =>
    `SELECT DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s.%f') AS at, actor, action, scope, target, confirmed, affected FROM ${n.table} ORDER BY id DESC LIMIT ?`,
  recentOf: (n) =>
    `SELECT DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s.%f') AS at, actor, action, scope, target, confirmed, affected FROM ${n.table} WHERE action = ? ORDER BY id DESC LIMIT ?`,
  probe: (n) =>
    `SELECT id, at, actor, action, scope, target, confirmed, affected FROM ${n.table} WHERE 1 = 0`,
};
