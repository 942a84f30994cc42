import type { SqlPort } from '../store/ports/sql-port';

/** What the `outbox log …` commands are given (the CLI's options). */
export interface LogCommandArgs {
  readonly table: string;
  readonly schema: string | null;
  /** `--slot`: the replication slot (PostgreSQL), else the table's default name. */
  readonly slot: string | undefined;
  /** `--publication` (PostgreSQL), else the table's default name. */
  readonly publication: string | undefined;
  /** `--yes`: `log drop` goes ahead. */
  readonly yes: boolean;
}

/** What one of these commands prints. */
export interface LogCommandResult {
  readonly text: string;
  readonly json: unknown;
  readonly exitCode?: number;
}

export type LogCommand = (args: LogCommandArgs, sql: SqlPort) => Promise<LogCommandResult>;

/**
 * `outbox log setup`, `log status` and `log drop` (and `schema migrate --log-tailing`, which
 * runs setup) on one database.
 */
export interface LogCommands {
  readonly setup: LogCommand;
  readonly status: LogCommand;
  readonly drop: LogCommand;
}

/** A command line a log command cannot run as given: the CLI reports it with its usage. */
export class LogCommandUsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

export function formatBytes(bytes: number | null): string {
  if (bytes === null) return 'an unknown amount';
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 'B';
  for (const u of units) {
    if (value < 1024) break;
    value /= 1024;
    unit = u;
  }
  return `${value.toFixed(1)} ${unit}`;
}
