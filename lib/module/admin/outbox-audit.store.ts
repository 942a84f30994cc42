import { OutboxRedriveRefusedError } from '../../errors/outbox-redrive-refused.error';
import { describeError } from '../../internal/describe-error';
import { refuseUnknownCallOptions } from '../../internal/known-keys';
import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SqlPort, SqlRunner } from '../../store/ports/sql-port';
import {
  auditEntryOf,
  auditInsertValues,
  type AuditRow,
  type AuditSql,
} from '../../store/shared-sql/audit-sql';
import {
  AUDIT_TABLE_KEYS,
  auditSqlOf,
  auditTableNames,
  type OutboxAuditTableOptions,
} from '../../store/shared-sql/audit-table';
import { outboxDialectOf } from '../../store/schema/outbox-table-ddl';
import type { OutboxAuditEntry } from './outbox-redrive.interfaces';

/**
 * The audit log table (the console's, `outbox_console_audit` by default) over the outbox's SQL
 * port, for the admin API and the `outbox` command: re-drives are recorded here, in the
 * transaction of their first copies, and listed from here. Its options take `tableName` and
 * `schema`; any other key throws `OutboxOptionsError` before anything is read.
 */
export class OutboxAuditStore {
  private readonly sql: AuditSql;
  readonly names: OutboxTableNames;

  constructor(
    private readonly sqlPort: SqlPort,
    options: OutboxAuditTableOptions = {},
  ) {
    // `{ table: 'billing_audit' }` would otherwise record and list in the default table.
    refuseUnknownCallOptions('new OutboxAuditStore()', options, AUDIT_TABLE_KEYS);
    const dialect = outboxDialectOf(sqlPort.databaseType);
    this.sql = auditSqlOf(dialect);
    this.names = auditTableNames(dialect, options);
  }

  /** Resolves when the table can be read; rejects with the database's error otherwise. */
  async probe(): Promise<void> {
    await this.sqlPort.query(this.sql.probe(this.names));
  }

  /**
   * Resolves when the table can be read; otherwise refuses an audited action with
   * `OutboxRedriveRefusedError` (`no-audit-table`) and the text `message` makes of the table's
   * name and the database's error: nothing is done that the audit could not record.
   */
  async probeOrRefuse(message: (table: string, error: string) => string): Promise<void> {
    try {
      await this.probe();
    } catch (error) {
      throw new OutboxRedriveRefusedError(
        message(this.names.table, describeError(error)),
        'no-audit-table',
        null,
        null,
      );
    }
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
