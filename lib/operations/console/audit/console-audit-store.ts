import type { DataSource } from 'typeorm';
import { OutboxOptionsError } from '../../../errors/outbox-options.error';
import { describeError } from '../../../internal/describe-error';
import { OutboxMessages } from '../../../outbox.messages';
import { outboxDialectOf } from '../../../store/schema/outbox-table-ddl';
import type { OutboxTableNames } from '../../../internal/sql-identifier';
import type { OutboxConsoleAuditEntry } from '../console.options';
import {
  auditEntryOf,
  auditInsertValues,
  type AuditRow,
  type AuditSql,
} from '../../../store/shared-sql/audit-sql';
import {
  consoleAuditSqlOf,
  consoleAuditTableNames,
  type OutboxConsoleAuditTableOptions,
} from './console-audit-table';

/** The console's audit log in a table of the app's database (see docs/console.md#audit-log). */
export class ConsoleAuditStore {
  private readonly sql: AuditSql;
  private readonly names: OutboxTableNames;

  constructor(
    private readonly dataSource: DataSource,
    options: OutboxConsoleAuditTableOptions,
  ) {
    const dialect = outboxDialectOf(dataSource.options.type);
    this.sql = consoleAuditSqlOf(dialect);
    this.names = consoleAuditTableNames(dialect, options);
  }

  /** Fails the app's start when the table is missing, saying how to create it. */
  async check(): Promise<void> {
    try {
      await this.dataSource.query(this.sql.probe(this.names));
    } catch (error) {
      throw new OutboxOptionsError(
        `Invalid OutboxConsoleModule option "auditTable": the audit table ${this.names.table} cannot be read (${describeError(error)}). Create it with ensureOutboxConsoleAuditTable(dataSource), ${OutboxMessages.auditTableDdl()} or with the command "outbox schema migrate --audit" (see docs/console.md#audit-log), or leave auditTable out to keep the audit log in memory.`,
        'auditTable',
      );
    }
  }

  async insert(entry: OutboxConsoleAuditEntry): Promise<void> {
    await this.dataSource.query(this.sql.insert(this.names), auditInsertValues(entry));
  }

  async recent(limit: number): Promise<OutboxConsoleAuditEntry[]> {
    const rows = await this.dataSource.query<AuditRow[]>(this.sql.recent(this.names), [limit]);
    // The table holds only what the console and the admin wrote: their own actions and scopes.
    return rows.map((row) => auditEntryOf(row) as OutboxConsoleAuditEntry);
  }
}
