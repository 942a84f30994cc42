/**
 * `nestjs-outbox/schema`: the outbox's tables, for migrations, set-up scripts and tests. The
 * TypeORM migrations (`outboxMigrations`), the tables made or dropped on a DataSource or a
 * connection's SQL port (`ensureOutboxTable`, `createOutboxTable`, `dropOutboxTables`), their
 * DDL per database (`outboxTableDdl`), the archive, the MySQL/MariaDB binary ids, the console's
 * audit table and the time partitions. No optional peer. See docs/outbox-table.md.
 */
export { createOutboxMigration } from '../typeorm/outbox-table.migration';
export { outboxMigrations } from '../typeorm/outbox-migrations';
export { createOutboxArchiveMigration } from '../typeorm/outbox-archive.migration';
export { createOutboxBinaryIdsMigration } from '../typeorm/outbox-binary-ids.migration';
export {
  migrateOutboxToBinaryIds,
  type OutboxBinaryIdsOptions,
} from '../store/schema/binary-message-ids';
export type { MessageIdConversion as OutboxMessageIdConversion } from '../store/outbox-database';
export {
  dropOutboxTables,
  ensureOutboxArchiveTable,
  ensureOutboxTable,
  type OutboxTableDropOptions,
} from '../typeorm/typeorm-tables';
export {
  createOutboxArchiveTable,
  createOutboxTable,
  outboxArchiveTableDdl,
  outboxSchemaStatements,
  outboxTableDdl,
  type OutboxDialect,
  type OutboxTableOptions,
} from '../store/schema/outbox-table-ddl';
export {
  DEFAULT_AUDIT_TABLE,
  outboxAuditTableDdl,
  type OutboxAuditTableOptions,
} from '../store/shared-sql/audit-table';
export type { OutboxStepOption } from '../store/schema/schema-steps';
export type { SchemaOnline as OutboxOnlineSteps } from '../store/outbox-database';
export { outboxPartitions } from '../store/partitions/outbox-partitions';
export type {
  OutboxPartition,
  OutboxPartitionPolicy,
  OutboxPartitionRows,
  OutboxPartitionsPort,
  OutboxPartitionsReport,
  OutboxPartitionsStatus,
  OutboxTableLayout,
} from '../store/ports/outbox-partitions.port';
export { OutboxTableLayoutError } from '../errors/outbox-table-layout.error';
export { OutboxMessageIdLayoutError } from '../errors/outbox-message-id-layout.error';
