import type { OutboxTableNames } from '../../internal/sql-identifier';
import type { SchemaOnline, StatementRunner } from '../outbox-database';

/** A column the server computes from other columns of the row, and the index that reads it. */
export interface FilledColumn {
  readonly column: string;
  /** Names the trigger and its function, `<table>_<tag>_fill` (short: table names are long). */
  readonly tag: string;
  readonly type: string;
  /** The value, from the row's own columns (unqualified; `NEW.` is prefixed in the trigger). */
  readonly expression: string;
  /** The columns `expression` reads: an UPDATE of one of them computes it again. */
  readonly sources: readonly string[];
  readonly index: { readonly name: string; readonly definition: string };
}

const DEFAULT_BATCH_ROWS = 10_000;

/** The trigger's (and its function's) name. */
export function fillName(n: OutboxTableNames, tag: string): string {
  return `${n.tableName}_${tag}_fill`;
}

/**
 * Adds `column` to a table with rows without blocking its writes for longer than a catalog
 * change, where a stored generated column would rewrite the table under an exclusive lock:
 *
 * 1. `ADD COLUMN` without a default (catalog only);
 * 2. a `BEFORE INSERT OR UPDATE OF <sources>` trigger that computes it for every row written
 *    from then on (made in one statement, so no insert falls between a drop and a create),
 *    fired `ALWAYS` (also under `session_replication_role = replica`);
 * 3. the rows already there, in batches of ids, each batch its own short statement (its row
 *    locks held only while it runs), up to the last id at the time the trigger existed;
 * 4. the index, `CREATE INDEX CONCURRENTLY` (an invalid one a failed build left is dropped
 *    first). It comes last: a table with a valid index has the column on every row.
 *
 * Each statement runs on its own (the runner must not be inside a transaction: CONCURRENTLY
 * refuses one). Stopped anywhere, running it again finishes it.
 */
export async function addFilledColumnOnline(
  run: StatementRunner,
  n: OutboxTableNames,
  online: SchemaOnline,
  filled: FilledColumn,
): Promise<void> {
  const { column, type, expression, sources, index } = filled;
  const fill = fillName(n, filled.tag);
  await run(`ALTER TABLE ${n.table} ADD COLUMN IF NOT EXISTS ${column} ${type}`);
  // A generated column (a table the one-statement form made) is computed by the server already.
  const generated = (await run(
    `SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND attgenerated <> ''`,
    [n.table, column],
  )) as unknown[];
  if (generated.length === 0) {
    const rowExpression = sources.reduce(
      (text, source) => text.replace(new RegExp(`\\b${source}\\b`, 'g'), `NEW.${source}`),
      expression,
    );
    await run(`CREATE OR REPLACE FUNCTION ${n.qualify(fill)}() RETURNS trigger LANGUAGE plpgsql AS $fill$
BEGIN
  NEW.${column} := ${rowExpression};
  RETURN NEW;
END
$fill$`);
    await run(`DO $make$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '${n.table}'::regclass AND tgname = '${fill}') THEN
    CREATE TRIGGER ${n.quote(fill)} BEFORE INSERT OR UPDATE OF ${sources.join(', ')} ON ${n.table}
      FOR EACH ROW EXECUTE FUNCTION ${n.qualify(fill)}();
  END IF;
END
$make$`);
    // Fired in every session, also where ordinary triggers are not (session_replication_role
    // replica: a logical replication subscriber applying the table, a restore with triggers
    // disabled), as a generated column is computed: a row left without its value would be
    // passed over by every read that names partitions or tenants. Idempotent, as the rest.
    await run(`ALTER TABLE ${n.table} ENABLE ALWAYS TRIGGER ${n.quote(fill)}`);
    // Every row written from here on is computed by the trigger: fill those before it.
    const [bounds] = (await run(
      `SELECT min(id)::text AS first, max(id)::text AS last FROM ${n.table}`,
    )) as { first: string | null; last: string | null }[];
    if (bounds?.first != null && bounds.last != null) {
      const size = BigInt(online.batchRows ?? DEFAULT_BATCH_ROWS);
      const last = BigInt(bounds.last);
      for (let from = BigInt(bounds.first) - 1n; from < last; from += size) {
        const to = from + size < last ? from + size : last;
        await run(
          `UPDATE ${n.table} SET ${column} = ${expression}
WHERE id > $1 AND id <= $2 AND ${column} IS DISTINCT FROM (${expression})`,
          [from.toString(), to.toString()],
        );
        await online.afterBatch?.(to.toString(), last.toString());
      }
    }
  }
  const indexes = (await run(
    `SELECT x.indisvalid AS valid FROM pg_index AS x WHERE x.indexrelid = to_regclass($1)`,
    [n.qualify(index.name)],
  )) as { valid: boolean }[];
  if (indexes[0]?.valid === false) {
    await run(`DROP INDEX CONCURRENTLY IF EXISTS ${n.qualify(index.name)}`);
  }
  await run(
    `CREATE INDEX CONCURRENTLY IF NOT EXISTS ${n.quote(index.name)} ON ${n.table} ${index.definition}`,
  );
}
