/**
 * `nestjs-outbox/log-tailing`: the dispatcher learns of new messages from the database's log
 * instead of polling the table for them: `dispatcher: { observe: logTailing() }`. PostgreSQL
 * reads logical replication (`pgoutput`) through the optional peer `pg-logical-replication`;
 * MySQL/MariaDB reads the binlog through the optional peer `@vlasky/zongji`, loaded only when
 * the dispatcher starts on MySQL.
 * The table stays the record of every message. See docs/log-tailing.md.
 */
export { logTailing } from './log-tailing.observer';
export { logTailingMigration } from './log-tailing.migration';
export type { LogTailingOptions } from './log-tailing.options';
export { PostgresLogSource } from './postgres/postgres-log.source';
export type { PostgresLogSourceSettings } from './postgres/postgres-log.source';
export { MysqlBinlogSource, mysqlLogSource } from './mysql/mysql-binlog.source';
export type { MysqlLogSourceSettings } from './mysql/mysql-binlog.source';
export type { BinlogClientClass, MysqlBinlogConnectionSettings } from './mysql/mysql-binlog-client';
export type {
  LoggedBatch,
  LoggedInsert,
  OutboxLogLag,
  OutboxLogObserver,
  OutboxLogSource,
  OutboxLogSourceContext,
  OutboxLogConnectionSettings,
} from '../store/ports/outbox-log-source.port';
export { postgresLogNames, postgresLogTailingDdl } from './postgres/postgres-log-tailing.sql';
export {
  mysqlLogPositionTable,
  mysqlLogTailingDdl,
  mysqlLogTailingDrop,
} from './mysql/mysql-log-tailing.sql';
