import type { SqlPort, SqlResult, SqlRunner } from '../../store/ports/sql-port';
import { placeholders, type PlaceholderStyle } from '../../drivers/sql-placeholders';
import { outboxDatabase, type OutboxDialect } from '../../store/schema/outbox-table-ddl';
import type { MikroOrmEntityManager } from './mikro-orm-client';

/** The databases of MikroORM's SQL drivers the outbox runs on. */
export type MikroOrmDatabase = OutboxDialect;

/**
 * The statements of a transaction MikroORM opened: `em.getConnection().execute(…)` with the
 * manager's transaction context, so they run on the transaction's connection.
 */
export function mikroOrmSqlRunner(
  em: MikroOrmEntityManager,
  ctx: unknown,
  database: MikroOrmDatabase,
): SqlRunner {
  return { query: (sql, params) => run(em, ctx, database, sql, params) };
}

/**
 * The outbox's own work through MikroORM: statements on its pool, and short READ COMMITTED
 * transactions of the driver connection's own, never through `em.transactional()`: MikroORM
 * resolves `orm.em` to the transaction of the async context, so an admin call or a `runOnce()`
 * made inside the app's `transactional` callback would nest into the app's transaction (and
 * roll back with it). No `listen`: MikroORM holds no connection for notifications, so the
 * dispatcher polls.
 *
 * SQLite: MikroORM's pool there is one connection, which the app's transaction holds until it
 * ends, so the port's statements wait for it rather than join it; the dispatcher works on a
 * connection of its own to `databaseFile` (the ORM's `dbName`).
 */
export function mikroOrmSqlPort(
  em: MikroOrmEntityManager,
  database: MikroOrmDatabase,
  databaseFile?: string,
): SqlPort {
  const connection = em.getConnection();
  const { file, serializableOnly } = outboxDatabase(database);
  return {
    databaseType: database,
    // MikroORM.init() connects; its pool opens connections as statements need them.
    isConnected: true,
    ...(file ? { databaseFile: databaseFile ?? '' } : {}),
    query: (sql, params) => run(em, undefined, database, sql, params),
    transaction: (work) =>
      connection.transactional(
        (trx) => work(mikroOrmSqlRunner(em, trx, database)),
        // MikroORM's IsolationLevel.READ_COMMITTED, by value: its enum is not imported here.
        // SQLite's transactions are serializable; knex warns at any other level asked for.
        serializableOnly ? {} : { isolationLevel: 'read committed' },
      ),
  };
}

async function run<R>(
  em: MikroOrmEntityManager,
  ctx: unknown,
  database: MikroOrmDatabase,
  text: string,
  params: readonly unknown[] | undefined,
): Promise<SqlResult<R>> {
  const { placeholders: style, insertIdReportsWrite } = outboxDatabase(database);
  const [sql, values] = IN_MIKRO_ORM_STYLE[style](text, params ?? []);
  const answer = await em.getConnection().execute(sql, values, 'run', ctx);
  if (Array.isArray(answer)) return { rows: answer as R[], affected: 0 };
  const result = answer as { affectedRows?: number; insertId?: unknown; rows?: unknown[] };
  const rows = (result.rows ?? []) as R[];
  if (insertIdReportsWrite) {
    return { rows, affected: result.affectedRows ?? 0, insertId: Number(result.insertId ?? 0) };
  }
  // node-postgres counts the rows of a SELECT too, and MikroORM counts the rows a SQLite
  // statement answered; the port's `affected` counts changed rows.
  return { rows, affected: reads(text) ? 0 : (result.affectedRows ?? 0) };
}

/**
 * The outbox's PostgreSQL statement in MikroORM's placeholder style: `$n` becomes `?` with its
 * value at that place (a number used twice, twice), and a `?` of the text is escaped (`\?`),
 * since MikroORM would take it for a placeholder. An array becomes a PostgreSQL array literal:
 * MikroORM would spread it into a list, and the outbox casts whole arrays (`$1::uuid[]`).
 */
function questionMarks(text: string, params: readonly unknown[]): [string, unknown[]] {
  let sql = '';
  const values: unknown[] = [];
  let start = 0;
  for (const placeholder of placeholders(text, 'numbered')) {
    sql += escapeQuestionMarks(text.slice(start, placeholder.at)) + '?';
    start = placeholder.at + placeholder.length;
    const index = placeholder.index ?? 0;
    if (index >= params.length) {
      throw new RangeError(
        `The statement refers to parameter ${index + 1} but ${params.length} were given`,
      );
    }
    const value = params[index];
    values.push(Array.isArray(value) ? arrayLiteral(value) : value);
  }
  return [sql + escapeQuestionMarks(text.slice(start)), values];
}

/** MySQL and SQLite statements keep their `?` placeholders; only a `?` in a literal needs escaping. */
function escapeLiterals(text: string, params: readonly unknown[]): [string, unknown[]] {
  let sql = '';
  let start = 0;
  for (const placeholder of placeholders(text, 'question')) {
    sql += escapeQuestionMarks(text.slice(start, placeholder.at)) + '?';
    start = placeholder.at + placeholder.length;
  }
  return [sql + escapeQuestionMarks(text.slice(start)), [...params]];
}

/** A statement of the outbox, by how it marks its parameters, as MikroORM takes it. */
const IN_MIKRO_ORM_STYLE: Readonly<
  Record<PlaceholderStyle, (text: string, params: readonly unknown[]) => [string, unknown[]]>
> = { numbered: questionMarks, question: escapeLiterals };

const escapeQuestionMarks = (text: string): string => text.replace(/\?/g, '\\?');

/** A PostgreSQL array literal (`{"a","b",NULL}`), the text form every array type accepts. */
function arrayLiteral(values: readonly unknown[]): string {
  const items = values.map((value) => {
    if (value === null || value === undefined) return 'NULL';
    if (Array.isArray(value)) return arrayLiteral(value);
    const text = value instanceof Date ? value.toISOString() : elementText(value);
    return `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
  });
  return `{${items.join(',')}}`;
}

function elementText(value: unknown): string {
  switch (typeof value) {
    case 'string':
      return value;
    case 'number':
    case 'bigint':
    case 'boolean':
      return value.toString();
    default:
      return JSON.stringify(value) ?? '';
  }
}

/** Whether a statement only reads: a SELECT (the outbox's writes start with another word). */
function reads(text: string): boolean {
  return /^\s*(?:\(\s*)?select\b/i.test(text);
}
