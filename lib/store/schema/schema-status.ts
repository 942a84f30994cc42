import {
  outboxDatabase,
  outboxDialectOf,
  tableNamesFor,
  tableStepOptions,
  type OutboxTableOptions,
} from './outbox-table-ddl';
import type { SqlPort } from '../ports/sql-port';
import { OUTBOX_SCHEMA_STEPS, stepIsFor, type OutboxSchemaStep } from './schema-steps';
import type { MessageIdLayout } from '../rows/message-id-codec';

/** One part of the outbox schema, in the order the schema grew (and the migration steps run). */
export interface OutboxSchemaPart {
  /** The `outboxMigrations()` step that makes it. */
  readonly step: number;
  readonly part: OutboxSchemaStep['part'];
  readonly present: boolean;
  /**
   * Whether the table is made for it: false for the step of an option not asked (`with`),
   * which the version passes over and a migrate leaves out.
   */
  readonly needed: boolean;
  /** The option it exists for (`with`), or null for a step every table gets. */
  readonly forOption: string | null;
  /** What is missing, or what a migrate would do; null when present. */
  readonly missing: string | null;
  /** How making it on a table with rows blocks writes on this database, or null. */
  readonly rewrites: string | null;
}

/** Where a table stands: its parts, and the schema version they add up to. */
export interface OutboxSchemaStatus {
  /**
   * The last step whose part and every earlier one are present, passing over the steps of
   * options not asked (`with`): 0 with no usable table, and `latest` when the table is up to
   * date for those options. Read from the database itself, never from a
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
  const run = async (statement: string, params?: unknown[]): Promise<unknown> =>
    (await sql.query(statement, params)).rows;
  const tableExists = await run(`SELECT 1 FROM ${names.table} WHERE 1 = 0`).then(
    () => true,
    () => false,
  );
  const context = { database, names, run, partitioning: null };
  const asked = tableStepOptions(options);
  const parts: OutboxSchemaPart[] = [];
  for (const [index, step] of OUTBOX_SCHEMA_STEPS.entries()) {
    const missing = await step.missing(context);
    parts.push({
      step: index + 1,
      part: step.part,
      present: missing === null,
      needed: stepIsFor(step, asked),
      forOption: step.forOption ?? null,
      missing,
      rewrites: step.rewrites(database),
    });
  }
  const firstMissing = parts.findIndex((p) => !p.present && p.needed);
  const ids =
    tableExists && database.schema.messageIdLayout !== undefined
      ? await database.schema.messageIdLayout(run, names)
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
