import { LogCommandUsageError, type LogCommands } from '../../log-tailing/log-commands';
import { LOG_TAILING_DATABASES, logTailingTitles } from '../../log-tailing/log-tailing.databases';
import type { SqlPort } from '../../store/ports/sql-port';
import type { CliArgs } from './cli-args';
import { CliUsageError } from './cli-usage.error';
import type { CliDatabase } from './database-url';

// The `outbox log …` commands and `schema migrate --log-tailing` (docs/log-tailing.md): each
// database's are in its log-tailing folder (lib/log-tailing/<database>/), found by dialect.
// Apart from outbox-cli.ts, which only routes to them.

/** What one of these commands prints. */
export interface LogCliResult {
  readonly text: string;
  readonly json: unknown;
  readonly exitCode?: number;
}

/**
 * Creates what log tailing reads (PostgreSQL: the publication, checked to cover the table, and
 * the replication slot; MySQL/MariaDB: the binlog position table), idempotent, so that the
 * app's first start neither waits for the server's open transactions nor fails its readiness
 * probe.
 */
export function logSetup(args: CliArgs, db: CliDatabase, sql: SqlPort): Promise<LogCliResult> {
  return run('log setup', 'setup', args, db, sql);
}

/** Where the log's reader is, what the server keeps for it, and whether a process reads it. */
export function logStatus(args: CliArgs, db: CliDatabase, sql: SqlPort): Promise<LogCliResult> {
  return run('log status', 'status', args, db, sql);
}

/** Drops what setup made, so the server stops keeping log for it (`--yes`). */
export function logDrop(args: CliArgs, db: CliDatabase, sql: SqlPort): Promise<LogCliResult> {
  return run('log drop', 'drop', args, db, sql);
}

async function run(
  command: string,
  which: keyof LogCommands,
  args: CliArgs,
  db: CliDatabase,
  sql: SqlPort,
): Promise<LogCliResult> {
  const database = LOG_TAILING_DATABASES[db.dialect];
  if ('unsupported' in database) {
    throw new CliUsageError(
      `"outbox ${command}" is for ${logTailingTitles('and')}: ${database.unsupported} to tail.`,
    );
  }
  try {
    return await database.commands[which](args, sql);
  } catch (error) {
    throw error instanceof LogCommandUsageError ? new CliUsageError(error.message) : error;
  }
}
