import type { OutboxTableNames } from '../internal/sql-identifier';
import type {
  ClaimCheckEntry,
  ClaimCheckLedgerPort,
  ClaimCheckState,
  ClaimCheckSwept,
} from '../publishers/claim-check/claim-check-ledger.port';
import type { OutboxDatabase } from './outbox-database';
import type { SqlPort } from './ports/sql-port';
import type { MessageIdLayout } from './rows/message-id-codec';
import { outboxDatabase, outboxDialectOf, tableNamesFor } from './schema/outbox-table-ddl';

/** The claim-check table of one outbox table, over its database's statements. */
export class ClaimCheckLedger implements ClaimCheckLedgerPort {
  private layout: Promise<MessageIdLayout> | undefined;

  constructor(
    private readonly sql: SqlPort,
    private readonly database: OutboxDatabase,
    private readonly names: OutboxTableNames,
    private readonly archive: boolean,
  ) {}

  async record(entries: readonly ClaimCheckEntry[]): Promise<ClaimCheckState[]> {
    if (entries.length === 0) return [];
    const sql = this.database.claimChecks;
    await sql.record(this.sql, this.names, entries);
    return sql.states(
      this.sql,
      this.names,
      entries.map((e) => e.blobId),
    );
  }

  async markStored(blobIds: readonly string[]): Promise<void> {
    if (blobIds.length > 0)
      await this.database.claimChecks.markStored(this.sql, this.names, blobIds);
  }

  read(blobId: string): Promise<{ payload: Buffer | null; contentType: string } | undefined> {
    return this.database.claimChecks.read(this.sql, this.names, blobId);
  }

  async sweep(
    graceMs: number,
    limit: number,
    deleted: (swept: readonly ClaimCheckSwept[]) => Promise<void>,
  ): Promise<ClaimCheckSwept[]> {
    const layout = await this.idLayout();
    const swept = await this.database.claimChecks.sweep(
      (work) => this.sql.transaction(work),
      this.names,
      { graceMs, limit, archive: this.archive, layout },
      deleted,
    );
    return swept.map(({ location, external }) => ({ location, external }));
  }

  /** How the outbox table stores its ids (MySQL/MariaDB), read once. */
  private idLayout(): Promise<MessageIdLayout> {
    const layoutOf = this.database.schema.messageIdLayout?.bind(this.database.schema);
    if (layoutOf === undefined) return Promise.resolve('text');
    this.layout ??= layoutOf(
      async (statement, params) => (await this.sql.query(statement, params)).rows,
      this.names,
    ).then(
      (report) => report.table ?? 'binary',
      (error: unknown) => {
        this.layout = undefined;
        throw error;
      },
    );
    return this.layout;
  }
}

/** The claim-check table beside the outbox table `tableName` on the port's database. */
export function claimCheckLedger(
  sql: SqlPort,
  table: { tableName: string; schema?: string | null; archive?: boolean },
): ClaimCheckLedger {
  const dialect = outboxDialectOf(sql.databaseType);
  return new ClaimCheckLedger(
    sql,
    outboxDatabase(sql.databaseType),
    tableNamesFor(dialect, { tableName: table.tableName, schema: table.schema ?? undefined }),
    table.archive === true,
  );
}
