import {
  outboxDatabase,
  outboxDialectOf,
  tableNamesFor,
  type OutboxTableOptions,
} from './outbox-table-ddl';
import type { SqlPort } from '../ports/sql-port';
import { payloadColumnsProbe } from './payload-columns';
import type { MessageIdLayout } from '../rows/message-id-codec';

/** One part of the outbox schema, in the order the schema grew (and the migration steps run). */
export interface OutboxSchemaPart {
  /** The `outboxMigrations()` step that makes it. */
  readonly step: number;
  readonly part:
    'table' | 'attempt-history' | 'cleaner-indexes' | 'payload-columns' | 'waiting-index';
  readonly present: boolean;
  /** What is missing, or what a migrate would do; null when present. */
  readonly missing: string | null;
}

/** Where a table stands: its parts, and the schema version they add up to. */
export interface OutboxSchemaStatus {
  /**
   * The last step whose part and every earlier one are present: 0 with no usable table, and
   * `latest` when the table is up to date. Read from the database itself, never from a
   * recorded number, so it cannot disagree with what is there.
   */
  readonly version: number;
  readonly latest: number;
  /** Whether a table of that name exists at all (version 0 may also be one the app refuses). */
  readonly tableExists: boolean;
  readonly parts: readonly OutboxSchemaPart[];
  /**
   * How message ids are stored where the database has more than one way (MySQL/MariaDB):
   * `binary` (BINARY(16), what migrate makes), `text` (CHAR(36), made before 0.3, which
   * `outbox schema migrate --binary-ids` converts), or what keeps the app from using them
   * (`problem`). Null elsewhere, and with no table.
   */
  readonly messageIds: {
    readonly layout: MessageIdLayout | null;
    readonly problem: string | null;
  } | null;
}

/**
 * Inspects the outbox table of `options` (read only): which parts of the current schema it has
 * and what `outbox schema migrate` would add.
 */
export async function outboxSchemaStatus(
  sql: SqlPort,
  options: OutboxTableOptions = {},
): Promise<OutboxSchemaStatus> {
  const dialect = outboxDialectOf(sql.databaseType);
  const database = outboxDatabase(dialect);
  const names = tableNamesFor(dialect, options);
  const answers = (statement: string): Promise<boolean> =>
    sql.query(statement).then(
      () => true,
      () => false,
    );
  const tableExists = await answers(`SELECT 1 FROM ${names.table} WHERE 1 = 0`);
  // 0.1's table lacks these columns: it is there, but unusable until dropped (docs/upgrading.md).
  const columns =
    tableExists &&
    (await answers(
      `SELECT 1 FROM ${names.table} WHERE 1 = 0 AND last_attempt_at IS NULL AND dead_at IS NULL`,
    ));
  const tableProblem = !tableExists
    ? 'the table does not exist: migrate creates it'
    : !columns
      ? 'the table lacks last_attempt_at and dead_at (made by 0.1): drop it after draining, then migrate (docs/upgrading.md)'
      : await database.tableProblem?.(
          async (statement, params) => (await sql.query(statement, params)).rows,
          names,
        );
  const history = await answers(`SELECT 1 FROM ${names.attemptsTable} WHERE 1 = 0`);
  const indexes =
    tableExists &&
    (await database.hasCleanerIndexes(
      async (statement, params) => (await sql.query(statement, params)).rows,
      names,
    ));
  const payloadColumns = tableExists && (await answers(payloadColumnsProbe(names)));
  const waitingIndex =
    tableExists &&
    (database.waitingIndex === undefined ||
      (await database.waitingIndex.has(
        async (statement, params) => (await sql.query(statement, params)).rows,
        names,
      )));
  const parts: OutboxSchemaPart[] = [
    { step: 1, part: 'table', present: tableProblem === undefined, missing: tableProblem ?? null },
    {
      step: 2,
      part: 'attempt-history',
      present: history,
      missing: history ? null : `${names.attemptsTable} does not exist: migrate creates it`,
    },
    {
      step: 3,
      part: 'cleaner-indexes',
      present: indexes,
      missing: indexes
        ? null
        : "the cleaner's cut-off indexes are missing: migrate adds them (docs/upgrading.md has the non-blocking PostgreSQL form)",
    },
    {
      step: 4,
      part: 'payload-columns',
      present: payloadColumns,
      missing: payloadColumns
        ? null
        : 'the binary-payload and broker-attribute columns (payload_encoding, content_type, payload_bytes, broker_attributes) are missing: migrate adds them in place, rows kept',
    },
    {
      step: 5,
      part: 'waiting-index',
      present: waitingIndex,
      missing: waitingIndex
        ? null
        : `the index of waiting messages (${names.tableName}_waiting_idx) is missing: migrate adds it (docs/upgrading.md has the non-blocking PostgreSQL form)`,
    },
  ];
  const firstMissing = parts.findIndex((p) => !p.present);
  const ids =
    tableExists && database.messageIdLayout !== undefined
      ? await database.messageIdLayout(
          async (statement, params) => (await sql.query(statement, params)).rows,
          names,
        )
      : null;
  return {
    version: firstMissing === -1 ? parts.length : firstMissing,
    latest: parts.length,
    tableExists,
    parts,
    messageIds:
      ids === null
        ? null
        : {
            layout: ids.table,
            problem:
              ids.problem === null
                ? null
                : ids.problem.kind === 'mixed'
                  ? `two layouts (${ids.problem.detail}): "outbox schema migrate --binary-ids" finishes the conversion`
                  : `${ids.problem.table}.message_id is ${ids.problem.detail}, neither CHAR(36) nor BINARY(16): the app refuses it`,
          },
  };
}
