/**
 * `nestjs-outbox/log-tailing`: the dispatcher learns of new messages from the database's log
 * instead of polling the table for them: `delivery: logTailing()`. PostgreSQL
 * reads logical replication (`pgoutput`) through the optional peer `pg-logical-replication`;
 * MySQL/MariaDB reads the binlog through the optional peer `@vlasky/zongji`, loaded only when
 * the dispatcher starts on MySQL.
 * The table stays the record of every message. See docs/log-tailing.md.
 */
export { logTailing } from './log-tailing.observer';
export { logTailingMigration } from './log-tailing.migration';
export type { LogTailingOptions } from './log-tailing.options';
export type { BinlogClientClass } from './mysql/mysql-binlog-client';
export type { OutboxLogLag, OutboxLogObserver } from '../store/ports/outbox-log-source.port';
export { postgresLogNames, postgresLogTailingDdl } from './postgres/postgres-log-tailing.sql';
export { mysqlLogTailingDdl, mysqlLogTailingDrop } from './mysql/mysql-log-tailing.sql';
export {
  OutboxReplicationSlotWaitError,
  type OutboxSlotBlocker,
} from '../errors/outbox-replication-slot-wait.error';
