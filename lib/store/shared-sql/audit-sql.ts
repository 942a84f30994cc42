import type { OutboxTableNames } from '../../internal/sql-identifier';

/**
 * The statements of the audit table (the console's audit log, which re-drives write too) on one
 * database, in `<db>.audit-sql.ts` beside each database's store.
 */
export interface AuditSql {
  createTable(names: OutboxTableNames): string[];
  dropTable(names: OutboxTableNames): string[];
  /** Parameters: actor, action, scope, target, confirmed, affected; `at` is the database's now. */
  insert(names: OutboxTableNames): string;
  /** The newest rows first; parameter: the limit. */
  recent(names: OutboxTableNames): string;
  /** The newest rows of one action first; parameters: the action, the limit. */
  recentOf(names: OutboxTableNames): string;
  /** Selects every column and no row: fails when the table is missing or not this shape. */
  probe(names: OutboxTableNames): string;
}

/** One row of the audit table as the drivers return it. */
export interface AuditRow {
  at: Date | string;
  actor: string;
  action: string;
  scope: string;
  target: string;
  confirmed: number | string;
  affected: number | string;
}

/** An audit entry's fields as the audit table holds them. */
export interface AuditFields {
  readonly actor: string;
  readonly action: string;
  readonly scope: string;
  readonly target: string;
  readonly confirmed: number;
  readonly affected: number;
}

/** `insert`'s bound values: actor and target cut to their columns' sizes. */
export function auditInsertValues(entry: AuditFields): unknown[] {
  return [
    entry.actor.slice(0, 200),
    entry.action,
    entry.scope,
    entry.target.slice(0, 2000),
    entry.confirmed,
    entry.affected,
  ];
}

/** A row read back: PostgreSQL gives Dates, MySQL (formatted) and SQLite UTC text without a zone. */
export function auditEntryOf(row: AuditRow): AuditFields & { readonly at: Date } {
  return {
    at: auditTime(row.at),
    actor: row.actor,
    action: row.action,
    scope: row.scope,
    target: row.target,
    confirmed: Number(row.confirmed),
    affected: Number(row.affected),
  };
}

function auditTime(value: Date | string): Date {
  if (value instanceof Date) return value;
  const [whole = value, fraction = ''] = value.split('.');
  const ms = fraction === '' ? '' : `.${fraction.slice(0, 3).padEnd(3, '0')}`;
  return new Date(`${whole.replace(' ', 'T')}${ms}Z`);
}
