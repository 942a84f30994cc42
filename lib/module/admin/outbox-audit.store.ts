import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SqlPort, SqlRunner } from '../../store/ports/sql-port';
import {
  auditEntryOf,
  auditInsertValues,
  type AuditRow,
  type AuditSql,
} from '../../store/shared-sql/audit-sql';
import {
  auditSqlOf,
  auditTableNames,
  type OutboxAuditTableOptions,
} from '../../store/shared-sql/audit-table';
import { outboxDialectOf } from '../../store/schema/outbox-table-ddl';
import type { OutboxAuditEntry } from './outbox-redrive.interfaces';

/**
 * The audit log table (the console's, `outbox_console_audit` by default) over the outbox's SQL
 * port, for the admin API and the `outbox` command: re-drives are recorded here, in the
 * transaction of their first copies, and listed from here.
 */
export class OutboxAuditStore {
  private readonly sql: AuditSql;
  readonly names: OutboxTableNames;

  constructor(
    private readonly sqlPort: SqlPort,
    options: OutboxAuditTableOptions = {},
  ) {
    const dialect = outboxDialectOf(sqlPort.databaseType);
    this.sql = auditSqlOf(dialect);
    this.names = auditTableNames(dialect, options);
  }

  /** Resolves when the table can be read; rejects with the database's error otherwise. */
  async probe(): Promise<void> {
    await this.sqlPort.query(this.sql.probe(this.names));
  }

  /** Creates the table if it does not exist (`CREATE TABLE IF NOT EXISTS`). */
  async ensure(): Promise<void> {
    for (const statement of this.sql.createTable(this.names)) {
      await this.sqlPort.query(statement);
    }
  }

  /** Writes one entry, on `runner` (a transaction) or on a connection of the port's. */
  async record(
    entry: Omit<OutboxAuditEntry, 'at'>,
    runner: SqlRunner = this.sqlPort,
  ): Promise<void> {
    await runner.query(this.sql.insert(this.names), auditInsertValues(entry));
  }

  /** The newest entries first, of every action or of `action` only. */
  async recent(limit: number, action?: string): Promise<OutboxAuditEntry[]> {
    const { rows } =
      action === undefined
        ? await this.sqlPort.query<AuditRow>(this.sql.recent(this.names), [limit])
        : await this.sqlPort.query<AuditRow>(this.sql.recentOf(this.names), [action, limit]);
    return rows.map(auditEntryOf);
  }
}
