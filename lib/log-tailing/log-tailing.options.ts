/** The options of `logTailing()`. */
export interface LogTailingOptions {
  /**
   * The replication slot (PostgreSQL): lower-case letters, digits and `_`, at most 63.
   * @default `outbox_<database>_<schema>_<table>`, lower-cased (one per outbox table)
   */
  slotName?: string;
  /** The publication of the outbox table (PostgreSQL). @default `outbox_<schema>_<table>` */
  publicationName?: string;
  /**
   * How the replication connection reaches the server, e.g. as a role with REPLICATION.
   * @default the instance's own connection settings (a TypeORM DataSource's), else required
   */
  connectionString?: string;
  /** How often a standby asks for the log while another process reads it. @default 1000 */
  standbyRetryMs?: number;
  /**
   * How often the dispatcher still polls the table (retries, promotions, rows the log's reader
   * left to the table). @default 5000
   */
  sweepIntervalMs?: number;
  /** Most inserts received and not yet handed over before reading pauses. @default 50000 */
  maxQueued?: number;
}
