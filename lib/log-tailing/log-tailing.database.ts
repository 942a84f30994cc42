import type { OutboxTableNames } from '../internal/sql-identifier';
import type {
  OutboxLogSource,
  OutboxLogSourceContext,
} from '../store/ports/outbox-log-source.port';
import type { LogCommands } from './log-commands';
import type { LogTailingOptions } from './log-tailing.options';
import type { LogTailingSettings } from './log-tailing.settings';

/**
 * Log tailing on one database, kept in that database's folder (`lib/log-tailing/<database>/`):
 * its source, the DDL it needs beside the outbox table, and the `outbox log` commands. The
 * registry in `log-tailing.databases.ts` maps dialects to these.
 */
export interface LogTailingDatabase {
  /** The database as messages name it (`PostgreSQL`). */
  readonly title: string;
  /**
   * Checks this database's own options and resolves them, when `logTailing()` is called (so a
   * bad value fails at once, whatever database the app runs on); returns how to build the
   * source, which refuses the options that are another database's.
   */
  source(settings: LogTailingSettings): (context: OutboxLogSourceContext) => OutboxLogSource;
  /** The DDL log tailing needs, idempotent (`logTailingMigration()`'s up). */
  ddl(names: OutboxTableNames, options: Pick<LogTailingOptions, 'publicationName'>): string[];
  /** What removes it (the migration's down). */
  dropDdl(names: OutboxTableNames, options: Pick<LogTailingOptions, 'publicationName'>): string[];
  readonly commands: LogCommands;
}

/** A database without a log to tail, and why, in words for the refusal. */
export interface NoLogTailing {
  readonly unsupported: string;
}
