// nestjs-outbox/console: a web console for the outbox's operators, served by the app itself.
export { OutboxConsoleModule, type OutboxConsoleAsyncOptions } from './outbox-console.module';
export {
  DEFAULT_CONSOLE_PATH,
  type OutboxConsoleAuditEntry,
  type OutboxConsoleModuleExtras,
  type OutboxConsoleOptions,
  type OutboxConsoleRequest,
} from './console.options';
export {
  DEFAULT_CONSOLE_AUDIT_TABLE,
  ensureOutboxConsoleAuditTable,
  type OutboxConsoleAuditTableOptions,
} from './audit/console-audit-table';
