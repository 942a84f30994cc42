import { userInfo } from 'node:os';
import { schemaStepOf } from '../../store/schema/schema-steps';
import { OutboxAdmin } from '../../module/admin/outbox.admin';
import { OutboxAuditStore } from '../../module/admin/outbox-audit.store';
import {
  outboxAuditTableDdl,
  type OutboxAuditTableOptions,
} from '../../store/shared-sql/audit-table';
import type { OutboxRedrivePreview } from '../../module/admin/outbox-redrive.interfaces';
import type { OutboxMessageDetail } from '../../module/admin/outbox-admin.interfaces';
import { OutboxError } from '../../errors/outbox.error';
import { OutboxTableMissingError } from '../../errors/outbox-table-missing.error';
import type { OutboxStore, OutboxUpkeepPort } from '../../store/ports/outbox-store.port';
import { describeError, redactSecrets } from '../../internal/describe-error';
import { createOutboxStore } from '../../store/create-outbox-store';
import type { SqlPort } from '../../store/ports/sql-port';
import {
  createOutboxArchiveTable,
  createOutboxTable,
  outboxArchiveTableDdl,
  outboxDatabase,
  outboxDialectOf,
  outboxSchemaStatements,
  tableNamesFor,
  type OutboxDialect,
  type OutboxTableOptions,
} from '../../store/schema/outbox-table-ddl';
import { outboxPartitions, promoteAfterDrop } from '../../store/partitions/outbox-partitions';
import type { OutboxPartitionPolicy } from '../../store/ports/outbox-partitions.port';
import { outboxDatabaseOf, outboxDatabaseOfScheme } from '../../store/outbox-databases';
import { outboxSchemaStatus } from '../../store/schema/schema-status';
import { OUTBOX_SCHEMA_STEPS } from '../../store/schema/schema-steps';
import { migrateOutboxToBinaryIds } from '../../store/schema/binary-message-ids';
import { OutboxMessages } from '../../outbox.messages';
import {
  DEBEZIUM_CONNECTORS,
  debeziumConnectorConfig,
} from '../../store/schema/debezium-connector-config';
import { describeBinary, hexPreview } from '../../module/admin/binary-preview';
import { describeLayout } from '../../store/ports/outbox-partitions.port';
import { parseCliArgs, USAGE, type CliArgs } from './cli-args';
import { clip, formatDuration, plural, table } from './cli-output';
import { CliUsageError } from './cli-usage.error';
import { CliMessages } from './cli.messages';
import { databaseFromUrl, decodeUrlPart, dialectOfUrl, type CliDatabase } from './database-url';
import { flagErrorOf } from './cli-option-flags';
import { openCliConnection } from './cli-connection';
import { logDrop, logSetup, logStatus } from './cli-log-tailing';
import { deliveryPartitionsStatus } from './cli-delivery-partitions';

/** Where the CLI writes; the process streams in `main.ts`, buffers in tests. */
export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
}

/** What a command produced: the readable text, and the document `--json` prints instead. */
interface CliResult {
  readonly text: string;
  readonly json: unknown;
  readonly exitCode?: number;
  /** The command printed its output itself (`stats --watch`). */
  readonly printed?: true;
  /** What went wrong beside the output (ids that were not found): stderr, with exit code 1. */
  readonly problem?: string;
  /** What will go wrong later (a dry run whose run would be refused): stderr, exit code kept. */
  readonly warning?: string;
}

interface Connected {
  readonly sql: SqlPort;
  readonly store: OutboxStore;
  readonly admin: OutboxAdmin;
}

const CLEANUP_BATCH = 1_000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Runs one `outbox` command line and resolves to its exit code: 0 done, 1 failed or not found
 * (a message id that names no message, or no dead letter to retry or purge), 2 bad usage.
 * Never rejects, and never prints a stack trace or a credential: errors are one line on stderr.
 */
export async function runOutboxCli(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
  io: CliIo,
): Promise<number> {
  try {
    const args = parseCliArgs(argv);
    if (args.command === 'help') {
      io.stdout(USAGE);
      return 0;
    }
    const result = await execute(args, env, io);
    if (result.printed !== true)
      io.stdout(args.json ? `${JSON.stringify(result.json, null, 2)}\n` : `${result.text}\n`);
    if (result.warning !== undefined) io.stderr(`outbox: ${redactSecrets(result.warning)}\n`);
    if (result.problem !== undefined) {
      io.stderr(`outbox: ${redactSecrets(result.problem)}\n`);
      return 1;
    }
    return result.exitCode ?? 0;
  } catch (caught) {
    const error = flagErrorOf(caught) ?? caught;
    if (error instanceof CliUsageError) {
      io.stderr(`outbox: ${redactSecrets(error.message)}\nRun "outbox --help" for usage.\n`);
      return 2;
    }
    // Our own errors carry a complete message; anything else gets its type named too.
    const text = error instanceof OutboxError ? error.message : describeError(error);
    io.stderr(`outbox: ${redactSecrets(text)}\n`);
    return 1;
  }
}

function execute(
  args: CliArgs,
  env: Readonly<Record<string, string | undefined>>,
  io: CliIo,
): Promise<CliResult> {
  switch (args.command) {
    case 'help':
      return Promise.resolve({ text: USAGE, json: null });
    case 'schema print':
      return schemaPrint(args, env.DATABASE_URL);
    case 'cdc debezium':
      return Promise.resolve(cdcDebezium(args, env.DATABASE_URL));
    case 'schema migrate': {
      const db = databaseFromUrl(env.DATABASE_URL);
      if (!args.logTailing) return schemaMigrate(args, db);
      // The publication after the table, which it names (cli-log-tailing.ts).
      return schemaMigrate(args, db).then((migrated) =>
        withDatabase(db, false, (sql) => logSetup(args, db, sql)).then((log) => ({
          text: `${migrated.text}\n${log.text}`,
          json: { ...(migrated.json as object), logTailing: log.json },
          ...(log.exitCode === undefined ? {} : { exitCode: log.exitCode }),
        })),
      );
    }
    case 'log setup':
    case 'log status':
    case 'log drop': {
      const db = databaseFromUrl(env.DATABASE_URL);
      const command = { 'log setup': logSetup, 'log status': logStatus, 'log drop': logDrop }[
        args.command
      ];
      return withDatabase(db, false, (sql) => command(args, db, sql));
    }
    case 'schema status':
      return schemaStatus(args, databaseFromUrl(env.DATABASE_URL));
    case 'partitions status':
    case 'partitions maintain': {
      const db = databaseFromUrl(env.DATABASE_URL);
      return withDatabase(db, false, (sql) =>
        args.command === 'partitions status'
          ? partitionsStatus(args, sql)
          : partitionsMaintain(args, sql),
      );
    }
    default: {
      const db = databaseFromUrl(env.DATABASE_URL);
      return withDatabase(db, false, (sql) =>
        withStore(args, sql, (connected) => runCommand(args, connected, io)),
      );
    }
  }
}

function runCommand(args: CliArgs, c: Connected, io: CliIo): Promise<CliResult> {
  switch (args.command) {
    case 'dlq list':
      return dlqList(args, c);
    case 'dlq show':
      return dlqShow(args, c);
    case 'dlq retry':
      return dlqRetry(args, c);
    case 'dlq purge':
      return dlqPurge(args, c);
    case 'stats':
      return args.watch ? statsWatch(args, c, io) : stats(c, args.filter.tenant);
    case 'why':
      return why(args, c);
    case 'blocked':
      return blocked(args, c);
    case 'leases':
      return leases(args, c);
    case 'cleanup':
      return cleanup(args, c);
    case 'redrive':
      return redrive(args, c);
    case 'redrives':
      return redrives(args, c);
    case 'erase':
      return erase(args, c);
    case 'delivery-partitions status':
      return deliveryPartitionsStatus(
        c.admin,
        tableNamesFor(outboxDialectOf(c.sql.databaseType), {
          tableName: args.table,
          schema: args.schema ?? undefined,
        }).table,
      );
    default:
      throw new CliUsageError(`"outbox ${args.command}" needs no connection.`);
  }
}

function dialectNamed(name: string): OutboxDialect {
  const lower = name.toLowerCase();
  const database = outboxDatabaseOf(lower) ?? outboxDatabaseOfScheme(lower);
  if (database === undefined)
    throw new CliUsageError(`--dialect must be postgres, mysql (also for MariaDB) or sqlite.`);
  return database.dialect as OutboxDialect;
}

/** As `assertIdentifier` takes a name (the database of a MySQL connector). */
const SAFE_IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** Refuses `--partition-by` where the database has no partitioned tables, naming the flag. */
function checkPartitionBy(args: CliArgs, dialect: OutboxDialect): void {
  if (args.partitionBy !== undefined && outboxDatabase(dialect).partitioned === undefined) {
    throw new CliUsageError(CliMessages.partitionByUnsupported(dialect));
  }
}

function tableOptions(args: CliArgs): OutboxTableOptions {
  const partitioning =
    args.partitionBy === undefined
      ? {}
      : { partitioning: { interval: args.partitionBy, premake: args.premake } };
  const steps = {
    ...(args.withSteps.length === 0 ? {} : { with: args.withSteps }),
    ...(args.online ? { online: true } : {}),
  };
  return args.schema === null
    ? { tableName: args.table, ...partitioning, ...steps }
    : { tableName: args.table, schema: args.schema, ...partitioning, ...steps };
}

async function schemaPrint(args: CliArgs, url: string | undefined): Promise<CliResult> {
  let dialect: OutboxDialect | null;
  if (args.dialect !== undefined) dialect = dialectNamed(args.dialect);
  else if (url !== undefined && url !== '') dialect = dialectOfUrl(url);
  else dialect = null;
  if (dialect === null) {
    throw new CliUsageError(
      'Name the database: --dialect postgres|mysql|sqlite, or set DATABASE_URL.',
    );
  }
  checkPartitionBy(args, dialect);
  const statements = [
    ...(await outboxSchemaStatements(dialect, tableOptions(args))),
    ...(args.archive ? outboxArchiveTableDdl(dialect, tableOptions(args)) : []),
    ...(args.audit ? outboxAuditTableDdl(dialect, auditTableOptions(args)) : []),
  ];
  return {
    text: statements.map((s) => `${s};`).join('\n\n'),
    json: { dialect, table: args.table, schema: args.schema, statements },
  };
}

/**
 * `outbox cdc debezium`: the connector for this table, from DATABASE_URL's host, port, user and
 * database. The URL's password is never printed: the config names a Kafka Connect config provider
 * instead, which the docs show how to set up.
 */
function cdcDebezium(args: CliArgs, url: string | undefined): CliResult {
  const { connector } = args.cdc;
  if (connector === undefined) {
    throw new CliUsageError('Name the connector: --connector postgres, mysql or mariadb.');
  }
  if (url === undefined || url === '') {
    throw new CliUsageError(
      'Set DATABASE_URL to the database the connector reads (its password is not printed).',
    );
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new CliUsageError('DATABASE_URL is not a URL (postgres://user@host:5432/db, mysql://…).');
  }
  const kind = DEBEZIUM_CONNECTORS[connector];
  if (kind.schemaHistory && args.cdc.bootstrapServers === undefined) {
    throw new CliUsageError(CliMessages.cdcNeedsBootstrapServers(connector));
  }
  const dbname = decodeUrlPart(parsed.pathname.replace(/^\//, ''), 'database name');
  if (dbname === '' || parsed.hostname === '') {
    throw new CliUsageError('DATABASE_URL must name the host and the database.');
  }
  // The MySQL connector's table list names the database; PostgreSQL's takes any name.
  if (!kind.schemas && !SAFE_IDENTIFIER.test(dbname)) {
    throw new CliUsageError(CliMessages.cdcDatabaseName(dbname, connector));
  }
  const definition = debeziumConnectorConfig({
    connector,
    database: {
      hostname: parsed.hostname,
      port: parsed.port === '' ? kind.defaultPort : Number(parsed.port),
      user: decodeUrlPart(parsed.username, 'user name') || kind.defaultUser,
      dbname,
    },
    tableName: args.table,
    schema: kind.schemas ? (args.schema ?? undefined) : undefined,
    name: args.cdc.name,
    topicPrefix: args.cdc.topicPrefix,
    startWith: args.cdc.startWith,
    slotName: args.cdc.slot,
    publicationName: args.cdc.slot,
    schemaHistoryBootstrapServers: args.cdc.bootstrapServers,
    serverId: args.cdc.serverId,
  });
  return { text: JSON.stringify(definition, null, 2), json: definition };
}

async function schemaMigrate(args: CliArgs, db: CliDatabase): Promise<CliResult> {
  if (args.binaryIds && outboxDatabase(db.dialect).schema.convertMessageIds === undefined) {
    throw new CliUsageError(OutboxMessages.binaryIdsUnsupported(db.dialect));
  }
  checkPartitionBy(args, db.dialect);
  return withDatabase(db, true, async (sql) => {
    const names = tableNamesFor(db.dialect, tableOptions(args));
    const exists = (table: string): Promise<boolean> =>
      sql
        .query(`SELECT 1 FROM ${table} WHERE 1 = 0`)
        .then(() => true)
        .catch(() => false);
    const existed = await exists(names.table);
    const before = await outboxSchemaStatus(sql, tableOptions(args));
    const historyExisted = before.parts.some((p) => p.part === 'attempt-history' && p.present);
    await createOutboxTable(sql, tableOptions(args));
    const archiveExisted = args.archive && (await exists(names.archiveTable));
    if (args.archive) await createOutboxArchiveTable(sql, tableOptions(args));
    const audit = args.audit ? await ensureAuditTable(sql, args) : null;
    // After the archive, so that one made now is converted with the rest.
    const conversion = args.binaryIds
      ? await migrateOutboxToBinaryIds(sql, {
          tableName: args.table,
          ...(args.schema === null ? {} : { schema: args.schema }),
        })
      : null;
    // An existing table is left as it is: check that this version can use it.
    await withStore(args, sql, () => Promise.resolve());
    const added = before.parts
      .filter((p) => (p.step > 1 || existed) && !p.present && p.needed)
      .map((p) => {
        const done = OUTBOX_SCHEMA_STEPS[p.step - 1]?.added(names) ?? p.part;
        return p.part === 'table'
          ? `${done} (${(p.missing ?? '').replace(/: migrate .*$/, '')})`
          : done;
      });
    const archiveCreated = args.archive && !archiveExisted;
    const archived = !args.archive
      ? ''
      : archiveCreated
        ? ` Created its archive ${names.archiveTable}.`
        : ` Its archive ${names.archiveTable} already exists.`;
    const text =
      (!existed
        ? `Created the outbox table ${names.table}${args.partitionBy === undefined ? '' : `, partitioned by ${args.partitionBy} (${args.premake} partitions ahead; the app's partitioning option must say interval: '${args.partitionBy}')`} and its attempt history ${names.attemptsTable} (${db.dialect})${args.withSteps.length === 0 ? '' : `, with ${args.withSteps.join(', ')}`}.`
        : added.length > 0
          ? `The outbox table ${names.table} already exists; ${added.join('; ')}.`
          : `The outbox table ${names.table} already exists and is up to date; nothing changed.`) +
      archived +
      (audit === null
        ? ''
        : audit.created
          ? ` Created the audit table ${audit.table} (re-drives are recorded in it).`
          : ` Its audit table ${audit.table} already exists.`) +
      (conversion === null
        ? before.messageIds?.layout === 'text'
          ? ` Its message ids are CHAR(36) (made before 0.3): "outbox schema migrate --binary-ids" converts them to BINARY(16), rows kept, with the app stopped (docs/outbox-table.md).`
          : ''
        : conversion.converted.length === 0
          ? ' Its message ids are BINARY(16) already.'
          : ` Converted the message ids of ${conversion.converted.join(', ')} to BINARY(16), rows kept.`);
    return {
      text,
      json: {
        dialect: db.dialect,
        table: args.table,
        schema: args.schema,
        created: !existed,
        historyCreated: !historyExisted,
        archiveCreated,
        ...(audit === null ? {} : { auditCreated: audit.created }),
        ...(conversion === null ? {} : { binaryIdsConverted: conversion.converted }),
        ...(args.partitionBy === undefined ? {} : { partitionBy: args.partitionBy }),
      },
    };
  });
}

async function schemaStatus(args: CliArgs, db: CliDatabase): Promise<CliResult> {
  return withDatabase(db, false, async (sql) => {
    const status = await outboxSchemaStatus(sql, tableOptions(args));
    const names = tableNamesFor(db.dialect, tableOptions(args));
    const { table } = names;
    const layout = await outboxDatabase(db.dialect).partitioned?.layout(
      async (statement, params) => (await sql.query(statement, params)).rows,
      names,
    );
    const upToDate = status.version === status.latest;
    const width = Math.max(...status.parts.map((p) => p.part.length));
    const lines = [
      `Outbox table ${table} (${db.dialect}): schema version ${status.version} of ${status.latest}${upToDate ? ', up to date.' : '.'}`,
      ...status.parts.map(
        (p) =>
          `  ${p.step}  ${p.part.padEnd(width)}  ${
            p.present
              ? 'present'
              : p.needed
                ? `missing: ${p.missing ?? ''}${p.rewrites === null ? '' : ` (${p.rewrites}; --online does not block writes)`}`
                : `not made: only for the ${p.forOption ?? ''} option (migrate --with ${p.forOption ?? ''}${p.rewrites === null ? '' : `; ${p.rewrites}, --online does not block writes`})`
          }`,
      ),
      // The commonest cause of "version 0" is looking at the default name, not the app's table.
      ...(!status.tableExists
        ? [
            `There is no table ${table} in this database: if the app sets tableName or schema, pass the same --table and --schema.`,
          ]
        : []),
      ...(upToDate
        ? []
        : [
            `Run "outbox schema migrate${args.withSteps.length === 0 ? '' : ` --with ${args.withSteps.join(',')}`}" (same DATABASE_URL${args.table === 'outbox' ? '' : ', --table'}${args.schema === null ? '' : ', --schema'}), or run the DataSource's ...outboxMigrations(${args.withSteps.length === 0 ? '' : `{ with: [${args.withSteps.map((s) => `'${s}'`).join(', ')}] }`}), to bring it up to date.`,
          ]),
      ...(layout === undefined || layout.kind === 'missing'
        ? []
        : [
            `Layout: ${layout.kind === 'partitioned' ? `partitioned by ${layout.interval} (see "outbox partitions status")` : layout.kind === 'plain' ? 'plain (unpartitioned)' : `not the outbox's (${layout.problem})`}.`,
          ]),
      ...(status.messageIds === null
        ? []
        : [
            `Message ids: ${
              status.messageIds.problem !== null
                ? status.messageIds.problem
                : status.messageIds.layout === 'text'
                  ? 'CHAR(36) (made before 0.3); "outbox schema migrate --binary-ids" converts them to BINARY(16) in place, rows kept, with the app stopped (docs/outbox-table.md)'
                  : 'BINARY(16)'
            }.`,
          ]),
    ];
    return {
      text: lines.join('\n'),
      json: {
        dialect: db.dialect,
        table: args.table,
        schema: args.schema,
        version: status.version,
        latest: status.latest,
        upToDate,
        tableExists: status.tableExists,
        parts: status.parts,
        messageIds: status.messageIds,
        // SQLite has only the plain layout.
        layout: layout ?? { kind: status.tableExists ? 'plain' : 'missing' },
      },
    };
  });
}

async function withDatabase<T>(
  db: CliDatabase,
  createFile: boolean,
  work: (sql: SqlPort) => Promise<T>,
): Promise<T> {
  const connection = await openCliConnection(db, createFile);
  try {
    return await work(connection.sql);
  } finally {
    await connection.close();
  }
}

async function withStore<T>(
  args: CliArgs,
  sql: SqlPort,
  work: (connected: Connected) => Promise<T>,
): Promise<T> {
  // The table's layout is taken as it is (the CLI does not know the app's partitioning option).
  const options = {
    tableName: args.table,
    schema: args.schema,
    ordering: { enabled: true, onDeadLetter: args.onDeadLetter },
    cleaner: { archive: args.archive },
    delivery: args.delivery,
    auditTable: auditTableOptions(args),
    // --tenant reads tenant_id, which only tables migrated to step 7 have.
    tenants: args.filter.tenant === undefined ? null : {},
  };
  let store: OutboxStore;
  try {
    // Workers off: the CLI never claims, and on SQLite opens its write connection only if asked.
    store = await createOutboxStore(sql, options, { enabled: false, notify: false });
  } catch (error) {
    if (!(error instanceof OutboxTableMissingError)) throw error;
    const names = tableNamesFor(outboxDialectOf(sql.databaseType), {
      tableName: args.table,
      schema: args.schema ?? undefined,
    });
    if (error.table === names.archiveTable) {
      throw new OutboxError(
        `The archive table ${error.table} cannot be read (${describeError(error.cause)}). ` +
          'Create it with "outbox schema migrate --archive" (same --table/--schema), or leave --archive out to delete instead.',
      );
    }
    const tenantStep = schemaStepOf('tenant-column');
    if (error.missingStep === tenantStep) {
      throw new OutboxError(
        `The outbox table ${error.table} lacks the tenant_id column that schema step ${tenantStep} adds (${describeError(error.cause)}), which --tenant reads. ` +
          'Run "outbox schema migrate" with the same --table/--schema to add it in place, rows kept.',
      );
    }
    if (error.missingStep === 4) {
      throw new OutboxError(
        `The outbox table ${error.table} lacks the binary-payload and broker-attribute columns that schema step 4 adds (${describeError(error.cause)}). ` +
          'Run "outbox schema migrate" with the same --table/--schema to add them in place, rows kept.',
      );
    }
    if (error.table === names.attemptsTable) {
      // The outbox table is there; only the attempt history (new after 0.3) is missing.
      throw new OutboxError(
        `The attempt-history table ${error.table} cannot be read (${describeError(error.cause)}): ` +
          'tables made by earlier versions lack it. Run "outbox schema migrate" with the same --table/--schema to add it in place, rows kept.',
      );
    }
    throw new OutboxError(
      `The outbox table ${error.table} cannot be read (${describeError(error.cause)}). ` +
        'Create it with "outbox schema migrate", or pass --table/--schema if yours has another name ' +
        '(a table from 0.1 must be drained and recreated: see "Upgrading from 0.1" in docs/upgrading.md).',
    );
  }
  try {
    return await work({ sql, store, admin: new OutboxAdmin(sql, store, options) });
  } finally {
    await store.close();
  }
}

function messageIds(args: CliArgs): string[] {
  for (const id of args.args) {
    if (!UUID.test(id)) {
      throw new CliUsageError(
        `"${id}" is not a message id (a UUID, as logged and in x-outbox-message-id).`,
      );
    }
  }
  return [...args.args];
}

async function dlqList(args: CliArgs, { admin }: Connected): Promise<CliResult> {
  const page = await admin.list(
    { ...args.filter, status: 'dead' },
    { after: args.after, limit: args.limit ?? 50 },
  );
  const rows = page.items.map((m) => [
    m.id,
    m.messageId,
    m.topic,
    m.key ?? '-',
    m.type,
    String(m.attempts),
    formatDuration(m.ageMs),
    clip(m.lastError, 50),
  ]);
  const lines =
    rows.length === 0
      ? ['No dead letters match.']
      : [
          table(
            ['ID', 'MESSAGE ID', 'TOPIC', 'KEY', 'TYPE', 'ATTEMPTS', 'AGE', 'LAST ERROR'],
            rows,
          ),
          '',
          page.nextCursor === null
            ? plural(rows.length, 'dead letter')
            : `${plural(rows.length, 'dead letter')}; next page: --after ${page.nextCursor}`,
        ];
  return { text: lines.join('\n'), json: page };
}

function iso(date: Date | null): string {
  return date === null ? '-' : date.toISOString();
}

function payloadJson(detail: OutboxMessageDetail): unknown {
  // A binary payload goes out whole as base64 (a JSON consumer of the command can decode it),
  // never as raw bytes.
  if (detail.encoding === 'binary' && detail.payloadBytes !== null) {
    return {
      encoding: 'binary',
      contentType: detail.contentType,
      size: detail.payloadBytes.length,
      base64: detail.payloadBytes.toString('base64'),
    };
  }
  try {
    return JSON.parse(detail.payload) as unknown;
  } catch {
    return detail.payload;
  }
}

async function dlqShow(args: CliArgs, { admin }: Connected): Promise<CliResult> {
  const [id, extra] = messageIds(args);
  if (id === undefined || extra !== undefined) {
    throw new CliUsageError('"outbox dlq show" takes exactly one message id.');
  }
  const m = await admin.get(id);
  if (m === null) throw new OutboxError(CliMessages.messageNotFound(id, args.table));
  const fields: [string, string][] = [
    ['message id', m.messageId],
    ['id', m.id],
    ['status', m.status],
    ['topic', m.topic],
    ['key', m.key ?? '-'],
    ['type', m.type],
    ['attempts', String(m.attempts)],
    ['created at', `${iso(m.createdAt)} (${formatDuration(m.ageMs)} ago)`],
    ['last attempt', iso(m.lastAttemptAt)],
    ['available at', iso(m.availableAt)],
    ['delivered at', iso(m.deliveredAt)],
    ['dead at', iso(m.deadAt)],
    ['locked by', m.lockedBy ?? '-'],
    ['locked until', iso(m.lockedUntil)],
    ['lock token', m.lockToken ?? '-'],
    ['headers', JSON.stringify(m.headers)],
    ...(m.attributes === null
      ? []
      : [['attributes', JSON.stringify(m.attributes)] as [string, string]]),
  ];
  const width = Math.max(...fields.map(([name]) => name.length));
  const text = [
    ...fields.map(([name, value]) => `${name.padEnd(width)}  ${value}`),
    `${'last error'.padEnd(width)}  ${(m.lastError ?? '-').split('\n').join(`\n${' '.repeat(width + 2)}`)}`,
    'attempt history',
    attemptHistory(m),
    ...(m.encoding === 'binary' && m.payloadBytes !== null
      ? [`payload (${describeBinary(m.payloadBytes, m.contentType)})`, hexPreview(m.payloadBytes)]
      : ['payload', JSON.stringify(payloadJson(m), null, 2)]),
  ].join('\n');
  const { payloadBytes: _bytes, ...shown } = m;
  return { text, json: { ...shown, payload: payloadJson(m) } };
}

/** The failed attempts, oldest first, one line each (the error's first line, clipped). */
function attemptHistory(m: OutboxMessageDetail): string {
  if (m.attemptHistory.length === 0) return '  (no failed attempt)';
  return table(
    ['  attempt', 'outcome', 'failed at', 'dispatcher', 'error class', 'error'],
    m.attemptHistory.map((a) => [
      `  ${a.attempt}`,
      a.outcome,
      iso(a.failedAt),
      a.lockedBy ?? '-',
      a.errorClass ?? '-',
      clip(a.error, 80),
    ]),
  );
}

async function dlqRetry(args: CliArgs, { admin }: Connected): Promise<CliResult> {
  const ids = messageIds(args);
  let report;
  let missed: NotDeadLetter[] = [];
  if (ids.length > 0) {
    if (args.filtered || args.all) {
      throw new CliUsageError('Give message ids, or filters, or --all: not several.');
    }
    missed = await notDeadLetters(admin, ids);
    report = await admin.retry(ids);
  } else if (args.all) {
    if (args.filtered) {
      throw new CliUsageError('--all retries every dead letter: drop it, or drop the filters.');
    }
    report = await admin.retryWhere({ all: true });
  } else if (args.filtered) {
    report = await admin.retryWhere(args.filter);
  } else {
    throw new CliUsageError(
      'Name the dead letters to retry: message ids, filters (--topic, --key, --type, --error, --older-than), or --all.',
    );
  }
  const retried = report.requeued + report.resequenced;
  const moved =
    report.resequenced === 0
      ? ''
      : ` (${report.resequenced} moved to the end of their key's queue, behind messages that went ahead)`;
  const result = withMissed(
    { text: `Retried ${plural(retried, 'dead letter')}${moved}.`, json: { retried, ...report } },
    missed,
    'retried',
  );
  if (report.expired.length === 0) return result;
  // Refused, not failed: a retry could only expire them again. Stderr and exit 1, as for ids
  // that are not dead letters.
  const refused = CliMessages.expiredNotRetried(report.expired);
  return {
    ...result,
    problem: result.problem === undefined ? refused : `${result.problem}\n${refused}`,
  };
}

interface NotDeadLetter {
  readonly messageId: string;
  /** Its status, or null when there is no such message. */
  readonly status: string | null;
}

/**
 * The ids named that are not dead letters, looked up before the retry or purge (which only
 * count what they changed): each is reported as not found, with exit code 1.
 */
async function notDeadLetters(
  admin: OutboxAdmin,
  ids: readonly string[],
): Promise<NotDeadLetter[]> {
  const missed: NotDeadLetter[] = [];
  for (const messageId of new Set(ids.map((id) => id.toLowerCase()))) {
    const status = (await admin.get(messageId))?.status ?? null;
    if (status !== 'dead') missed.push({ messageId, status });
  }
  return missed;
}

function withMissed(result: CliResult, missed: readonly NotDeadLetter[], done: string): CliResult {
  if (missed.length === 0) return result;
  return {
    ...result,
    json: { ...(result.json as object), notDeadLetters: missed },
    problem: CliMessages.notDeadLetters(
      done,
      missed.map((m) => `${m.messageId} (${m.status ?? 'no such message'})`),
    ),
  };
}

async function dlqPurge(args: CliArgs, { admin }: Connected): Promise<CliResult> {
  const ids = messageIds(args);
  let deleted: number;
  let missed: NotDeadLetter[] = [];
  if (ids.length > 0) {
    if (args.filtered || args.all) {
      throw new CliUsageError('Give message ids, or filters, or --all --yes: not several.');
    }
    missed = await notDeadLetters(admin, ids);
    deleted = await admin.purge(ids);
  } else if (args.filtered) {
    if (args.all)
      throw new CliUsageError('--all deletes every dead letter: drop it, or drop the filters.');
    // An age alone (--older-than 0, or any age once every dead letter is that old) can reach
    // every dead letter, so it needs the same --yes as no filter at all.
    if (!narrowsBeyondAge(args.filter) && !args.yes) {
      throw new CliUsageError(
        'Refusing to delete by age alone without --yes: it can reach every dead letter. Narrow it with --topic, --key, --type or --error, or add --yes.',
      );
    }
    deleted = await admin.purgeWhere(args.filter);
  } else if (args.yes) {
    deleted = await admin.purgeWhere({ all: true });
  } else {
    throw new CliUsageError(
      'Refusing to delete every dead letter without --yes. Narrow it with message ids or filters, or add --yes.',
    );
  }
  return withMissed(
    { text: `Deleted ${plural(deleted, 'dead letter')}.`, json: { deleted } },
    missed,
    'deleted',
  );
}

async function stats({ admin, store }: Connected, tenant?: string | null): Promise<CliResult> {
  const [counts, base] = await Promise.all([
    admin.counts(tenant === undefined ? {} : { tenant }),
    store.stats(),
  ]);
  const json = {
    ...counts,
    oldestPendingAgeMs: base.oldestPendingAgeMs,
    delivery: admin.delivery,
  };
  const states = ['pending', 'waiting', 'leased', 'delivered', 'dead'] as const;
  if (admin.delivery === 'external') {
    // Pending only means "written": the table never learns what Debezium delivered.
    const text = [
      `Delivery is external (Debezium): ${plural(counts.pending + counts.waiting, 'message')} written and kept for the cleaner's retention; the connector's lag says what is not yet in Kafka.`,
      `oldest row: ${base.oldestPendingAgeMs === null ? 'none' : formatDuration(base.oldestPendingAgeMs)}`,
    ].join('\n');
    return { text, json };
  }
  const text = [
    table(
      ['STATUS', 'COUNT'],
      states.map((s) => [s, String(counts[s])]),
    ),
    '',
    `oldest pending: ${base.oldestPendingAgeMs === null ? 'none' : formatDuration(base.oldestPendingAgeMs)}`,
    ...(counts.byTopic.length === 0
      ? []
      : [
          '',
          table(
            ['TOPIC', ...states.map((s) => s.toUpperCase())],
            counts.byTopic.map((t) => [t.topic, ...states.map((s) => String(t[s]))]),
          ),
        ]),
  ].join('\n');
  return { text, json };
}

/** `stats` again every interval, each frame stamped, until SIGINT or SIGTERM. */
async function statsWatch(args: CliArgs, c: Connected, io: CliIo): Promise<CliResult> {
  const stop = new AbortController();
  const onSignal = (): void => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    while (!stop.signal.aborted) {
      const frame = await stats(c, args.filter.tenant);
      const at = new Date().toISOString();
      io.stdout(
        args.json
          ? `${JSON.stringify({ at, ...(frame.json as object) })}\n`
          : `${at}\n${frame.text}\n\n`,
      );
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, args.intervalMs);
        stop.signal.addEventListener(
          'abort',
          () => {
            clearTimeout(timer);
            resolve();
          },
          { once: true },
        );
      });
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  return { text: '', json: null, printed: true };
}

async function why(args: CliArgs, { admin }: Connected): Promise<CliResult> {
  const [id, extra] = args.args;
  if (id === undefined || extra !== undefined) {
    throw new CliUsageError('"outbox why" takes one message id.');
  }
  if (!UUID.test(id)) throw new CliUsageError(`"${id}" is not a message id (a UUID).`);
  const answer = await admin.why(id);
  // Not found is a failure, as for every command that looks up one message by its id.
  if (answer.state === 'unknown') {
    throw new OutboxError(CliMessages.messageNotFound(id, args.table));
  }
  return { text: `${answer.state}: ${answer.reason}`, json: answer };
}

async function blocked(args: CliArgs, { admin }: Connected): Promise<CliResult> {
  const page = await admin.blockedKeys({ after: args.after, limit: args.limit ?? 50 });
  if (page.items.length === 0) return { text: 'No blocked keys.', json: page };
  const text = [
    table(
      ['KEY', 'HEAD MESSAGE ID', 'HEAD', 'ATTEMPTS', 'WAITING', 'OLDEST WAITING', 'LAST ERROR'],
      page.items.map((k) => [
        k.key,
        k.headMessageId,
        k.headStatus === 'dead' ? 'dead' : `retrying at ${iso(k.nextAttemptAt)}`,
        String(k.headAttempts),
        String(k.waiting),
        formatDuration(k.oldestWaitingAgeMs),
        clip(k.lastError, 50),
      ]),
    ),
    '',
    'A dead head holds its key until it is retried or purged: outbox dlq retry <head message id>.',
    ...(page.nextCursor === null ? [] : [`next page: --after ${page.nextCursor}`]),
  ].join('\n');
  return { text, json: page };
}

async function leases(args: CliArgs, { admin }: Connected): Promise<CliResult> {
  const page = await admin.stuckLeases({
    leasedLongerThanMs: args.longerThanMs,
    after: args.after,
    limit: args.limit ?? 50,
  });
  if (page.items.length === 0) return { text: 'No stuck leases.', json: page };
  const text = [
    table(
      ['MESSAGE ID', 'LOCKED BY', 'LEASE', 'LEASED FOR', 'ATTEMPTS', 'TOPIC', 'KEY'],
      page.items.map((m) => [
        m.messageId,
        m.lockedBy ?? '-',
        m.leaseExpired ? 'expired' : `held until ${iso(m.lockedUntil)}`,
        formatDuration(m.leasedForMs),
        String(m.attempts),
        m.topic,
        m.key ?? '-',
      ]),
    ),
    ...(page.nextCursor === null ? [] : ['', `next page: --after ${page.nextCursor}`]),
  ].join('\n');
  return { text, json: page };
}

async function purgeAll(
  store: OutboxUpkeepPort,
  status: 'delivered' | 'dead',
  olderThanMs: number,
  archive: boolean,
): Promise<number> {
  let total = 0;
  for (;;) {
    const deleted = await store.purge(status, olderThanMs, CLEANUP_BATCH, archive);
    total += deleted;
    if (deleted < CLEANUP_BATCH) return total;
  }
}

function partitionPolicy(args: CliArgs): OutboxPartitionPolicy {
  return {
    premake: args.premake,
    retentionMs: args.retentionMs,
    deadRetentionMs: args.deadRetentionMs,
  };
}

function partitionsOf(args: CliArgs, sql: SqlPort) {
  return outboxPartitions(sql, {
    tableName: args.table,
    schema: args.schema,
  });
}

function bytes(n: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit] ?? ''}`;
}

async function partitionsStatus(args: CliArgs, sql: SqlPort): Promise<CliResult> {
  // Rows by status read every partition in full: an operator's question, not the maintainer's.
  const status = await partitionsOf(args, sql).status(partitionPolicy(args), true);
  if (status.layout.kind !== 'partitioned') {
    // Not the dispatchers' delivery partitions, which an operator may have looked for here.
    throw new OutboxError(
      `${describeLayout(status.table, status.layout)} ${CliMessages.notDeliveryPartitions()}`,
    );
  }
  const rows = status.partitions.map((p) => [
    p.name,
    p.from === null ? (p.to === null ? 'catch-all' : '-') : p.from.toISOString().slice(0, 10),
    p.to === null ? '-' : p.to.toISOString().slice(0, 10),
    String(p.rows?.pending ?? 0),
    String(p.rows?.waiting ?? 0),
    String(p.rows?.delivered ?? 0),
    String(p.rows?.dead ?? 0),
    bytes(p.bytes),
    p.droppable ? 'droppable' : `kept: ${p.keptBecause ?? ''}`,
  ]);
  const droppable = status.partitions.filter((p) => p.droppable).length;
  const lines = [
    `Outbox table ${status.table}, partitioned by ${status.layout.interval} (retention ${formatDuration(args.retentionMs)}):`,
    table(
      ['PARTITION', 'FROM', 'TO', 'PENDING', 'WAITING', 'DELIVERED', 'DEAD', 'SIZE', 'DROP'],
      rows,
    ),
    '',
    `${plural(droppable, 'partition')} droppable now.` +
      (status.missing.length === 0
        ? ''
        : ` Missing ahead: ${status.missing.join(', ')} ("outbox partitions maintain" creates them).`),
  ];
  return {
    text: lines.join('\n'),
    json: {
      table: status.table,
      interval: status.layout.interval,
      now: status.now,
      partitions: status.partitions,
      missing: status.missing,
    },
  };
}

async function partitionsMaintain(args: CliArgs, sql: SqlPort): Promise<CliResult> {
  if (!args.dryRun) refuseDeadRetentionWithoutYes(args);
  const report = await partitionsOf(args, sql).maintain(partitionPolicy(args), args.dryRun);
  const promoted =
    report.dryRun || report.dropped.length === 0
      ? 0
      : await withStore(args, sql, ({ store }) => promoteAfterDrop(store, report));
  const would = args.dryRun ? 'Would ' : '';
  const lines =
    report.skipped !== null
      ? [`Nothing done: ${report.skipped}.`]
      : [
          report.created.length === 0
            ? `${args.dryRun ? 'Would create' : 'Created'} no partition (the next ${args.premake} exist).`
            : `${would}${args.dryRun ? 'create' : 'Created'} ${report.created.join(', ')}.`,
          report.dropped.length === 0
            ? `${args.dryRun ? 'Would drop' : 'Dropped'} no partition.`
            : `${would}${args.dryRun ? 'drop' : 'Dropped'} ${report.dropped.join(', ')}.`,
          ...(promoted === 0
            ? []
            : [`Promoted ${plural(promoted, 'waiting message')} whose dead head was dropped.`]),
          ...report.kept.map((k) => `Kept ${k.name}: it ${k.reason}.`),
          ...report.notCreated.map((k) => `Could not create ${k.name}: ${k.reason}.`),
        ];
  // Skipped because the table is not one the outbox partitions: a failure the operator must see.
  const failed = report.skipped !== null && !report.skipped.startsWith('another instance');
  return { text: lines.join('\n'), json: { ...report, promoted }, exitCode: failed ? 1 : 0 };
}

/**
 * `--dead-retention` deletes dead letters by age, which can reach every one of them: wherever it
 * deletes (cleanup, partitions maintain), it needs `--yes`.
 */
function refuseDeadRetentionWithoutYes(args: CliArgs): void {
  if (args.deadRetentionMs !== null && !args.yes) {
    throw new CliUsageError(
      'Refusing to delete dead letters by age without --yes: --dead-retention can reach every dead letter. Add --yes, or leave --dead-retention out to keep them.',
    );
  }
}

async function cleanup(args: CliArgs, { store }: Connected): Promise<CliResult> {
  if (!args.once) {
    throw new CliUsageError(
      '"outbox cleanup" runs once and exits: pass --once (the app\'s cleaner runs it on a schedule).',
    );
  }
  refuseDeadRetentionWithoutYes(args);

  const { archive } = args;
  if (args.delivery === 'external') {
    if (archive || args.deadRetentionMs !== null) {
      throw new CliUsageError(
        '--delivery external deletes rows by age whatever their status: leave out --archive and --dead-retention.',
      );
    }
    let expired = 0;
    for (;;) {
      const deleted = await store.purgeByAge(args.deliveredRetentionMs, CLEANUP_BATCH);
      expired += deleted;
      if (deleted < CLEANUP_BATCH) break;
    }
    return {
      text: `Deleted ${plural(expired, 'message')} written more than ${formatDuration(args.deliveredRetentionMs)} ago (delivery is external: by age, whatever their status).`,
      json: { expired },
    };
  }
  const delivered = await purgeAll(store, 'delivered', args.deliveredRetentionMs, archive);
  const dead =
    args.deadRetentionMs === null
      ? null
      : await purgeAll(store, 'dead', args.deadRetentionMs, archive);
  const done = archive ? 'Archived' : 'Deleted';
  const text = [
    `${done} ${plural(delivered, 'delivered message')} older than ${formatDuration(args.deliveredRetentionMs)}.`,
    dead === null
      ? 'Dead letters kept (no --dead-retention).'
      : `${done} ${plural(dead, 'dead letter')} older than ${formatDuration(args.deadRetentionMs)}.`,
  ].join('\n');
  return { text, json: { delivered, dead, archived: archive } };
}

/** Whether a dead-letter filter names something besides an age (which may match them all). */
function narrowsBeyondAge(filter: CliArgs['filter']): boolean {
  return (
    filter.topic !== undefined ||
    filter.key !== undefined ||
    filter.type !== undefined ||
    filter.errorContains !== undefined ||
    filter.tenant !== undefined
  );
}

/** Who runs the command, as the audit log names them: `--actor`, else the OS user. */
function cliActor(args: CliArgs): string {
  if (args.redrive.actor !== undefined) return args.redrive.actor;
  try {
    return userInfo().username;
  } catch {
    return process.env.USER ?? process.env.USERNAME ?? 'unknown';
  }
}

function redrivePreviewText(preview: OutboxRedrivePreview): string[] {
  const where = preview.includesArchive ? 'the outbox and its archive' : 'the outbox';
  const head = `${plural(preview.count, 'delivered message')} in ${where} match.`;
  if (preview.sample.length === 0) return [head];
  const rows = preview.sample.map((m) => [
    m.id,
    m.messageId,
    m.topic,
    m.key ?? '-',
    m.type,
    iso(m.createdAt),
    iso(m.deliveredAt),
    m.source,
  ]);
  const shown =
    preview.sample.length < preview.count ? [`(the first ${preview.sample.length} shown)`] : [];
  const confirmation =
    preview.confirmation === null
      ? [
          `More than --max ${preview.maxCount}: a re-drive of them would be refused. Narrow the filter (a time range, a key) or raise --max.`,
        ]
      : [
          `Confirmation: ${preview.confirmation} (--yes --expect ${preview.confirmation} re-drives exactly these, or nothing if they changed).`,
        ];
  return [
    head,
    table(['ID', 'MESSAGE ID', 'TOPIC', 'KEY', 'TYPE', 'CREATED', 'DELIVERED', 'FROM'], rows),
    ...shown,
    ...confirmation,
  ];
}

/**
 * The audit table the CLI's re-drives are recorded in: `--audit-table` (in `--schema`), else the
 * admin's default, as `schema migrate --audit` makes it.
 */
function auditTableOptions(args: CliArgs): OutboxAuditTableOptions {
  const tableName = args.redrive.auditTable;
  if (tableName === undefined) return {};
  return args.schema === null ? { tableName } : { tableName, schema: args.schema };
}

/** The command line that makes the audit table these arguments name. */
function auditTableCommand(args: CliArgs): string {
  return [
    'outbox schema migrate --audit',
    ...(args.table === 'outbox' ? [] : [`--table ${args.table}`]),
    ...(args.schema === null ? [] : [`--schema ${args.schema}`]),
    ...(args.redrive.auditTable === undefined ? [] : [`--audit-table ${args.redrive.auditTable}`]),
  ].join(' ');
}

/** Null when the audit table can be read, else its name and the database's reason. */
async function auditTableProblem(
  sql: SqlPort,
  args: CliArgs,
): Promise<{ readonly table: string; readonly cause: string } | null> {
  const audit = new OutboxAuditStore(sql, auditTableOptions(args));
  try {
    await audit.probe();
    return null;
  } catch (error) {
    return { table: audit.names.table, cause: describeError(error) };
  }
}

/** `schema migrate --audit`: creates the audit table unless it exists, then checks its shape. */
async function ensureAuditTable(
  sql: SqlPort,
  args: CliArgs,
): Promise<{ readonly table: string; readonly created: boolean }> {
  const audit = new OutboxAuditStore(sql, auditTableOptions(args));
  const existed = await sql
    .query(`SELECT 1 FROM ${audit.names.table} WHERE 1 = 0`)
    .then(() => true)
    .catch(() => false);
  await audit.ensure();
  const problem = await auditTableProblem(sql, args);
  if (problem !== null) {
    throw new OutboxError(
      `The table ${problem.table} exists but is not an audit table (${problem.cause}): name another with --audit-table.`,
    );
  }
  return { table: audit.names.table, created: !existed };
}

async function redrive(args: CliArgs, { admin, sql }: Connected): Promise<CliResult> {
  const r = args.redrive;
  if (args.dryRun && args.yes) throw new CliUsageError('Give --dry-run or --yes, not both.');
  if (r.expect !== undefined && !args.yes) {
    throw new CliUsageError(
      '--expect goes with --yes: it names the messages a dry run showed, to re-drive exactly those.',
    );
  }
  if (args.yes && (r.reason === undefined || r.reason.trim() === '')) {
    throw new CliUsageError('--reason is required to re-drive: say why, for the audit log.');
  }
  const preview = await admin.previewRedrive(
    r.filter,
    r.max === undefined ? {} : { maxCount: r.max },
  );
  const lines = redrivePreviewText(preview);
  const audit = await auditTableProblem(sql, args);
  if (!args.yes) {
    const json = {
      dryRun: true,
      count: preview.count,
      sample: preview.sample,
      confirmation: preview.confirmation,
      auditTable: audit === null ? { ready: true } : { ready: false, ...audit },
    };
    const warning =
      audit === null
        ? undefined
        : CliMessages.redriveDryRunNoAuditTable(audit.table, audit.cause, auditTableCommand(args));
    if (args.dryRun) {
      return {
        text: [...lines, 'Dry run: nothing sent.'].join('\n'),
        json,
        ...(warning === undefined ? {} : { warning }),
      };
    }
    const how =
      preview.confirmation === null
        ? '--yes (with --reason)'
        : `--yes --expect ${preview.confirmation} (with --reason)`;
    return {
      text: lines.join('\n'),
      json,
      problem: `Nothing sent: pass ${how} to re-drive ${plural(preview.count, 'message')}, or --dry-run to only preview.`,
      ...(warning === undefined ? {} : { warning }),
    };
  }
  if (audit !== null) {
    throw new OutboxError(
      CliMessages.redriveNoAuditTable(audit.table, audit.cause, auditTableCommand(args)),
    );
  }
  // Without --expect, the set this run printed is the one it confirms: what is sent is what
  // the lines above show, or nothing.
  const expected = r.expect ?? preview.confirmation;
  const report = await admin.redrive(r.filter, {
    actor: cliActor(args),
    reason: r.reason ?? '',
    ...(expected === null ? {} : { expected }),
    ...(r.to === undefined ? {} : { destination: r.to }),
    ...(r.rate === undefined ? {} : { ratePerSecond: r.rate }),
    ...(r.max === undefined ? {} : { maxCount: r.max }),
  });
  const to = report.destination === null ? 'their own topics' : report.destination;
  const pace = report.ratePerSecond === null ? '' : `, ${report.ratePerSecond} per second`;
  return {
    text: [
      ...lines,
      `Re-drove ${plural(report.count, 'message')} to ${to}${pace} (re-drive ${report.redriveId}, recorded in the audit log).`,
    ].join('\n'),
    json: report,
  };
}

/** `outbox erase <subject>`: the admin's erase, after --yes and a reason. */
async function erase(args: CliArgs, { admin, sql }: Connected): Promise<CliResult> {
  const [subject, ...more] = args.args;
  if (subject === undefined || subject === '' || more.length > 0) {
    throw new CliUsageError('Give one subject: outbox erase <subject> --reason TEXT --yes.');
  }
  const reason = args.redrive.reason;
  if (reason === undefined || reason.trim() === '') {
    throw new CliUsageError(
      '--reason is required to erase: say why (the request), for the audit log.',
    );
  }
  if (!args.yes) {
    return {
      text: '',
      json: { erased: false, dryRun: true },
      problem:
        "Nothing erased: an erasure cannot be undone. Pass --yes to destroy the subject's data key.",
    };
  }
  const audit = await auditTableProblem(sql, args);
  if (audit !== null) {
    throw new OutboxError(
      CliMessages.auditTableMissing(audit.table, audit.cause, auditTableCommand(args)),
    );
  }
  const report = await admin.erase(subject, {
    actor: cliActor(args),
    reason,
    auditTable: auditTableOptions(args),
  });
  return {
    text: report.erased
      ? `Erased: data key ${report.keyId ?? ''} destroyed, ${plural(report.notices, 'erasure notice')} enqueued (recorded in the audit log).`
      : 'The subject has no live data key (never sealed for, or erased already): nothing to destroy (recorded in the audit log).',
    json: report,
  };
}

async function redrives(args: CliArgs, { admin, sql }: Connected): Promise<CliResult> {
  const audit = await auditTableProblem(sql, args);
  if (audit !== null) {
    throw new OutboxError(
      CliMessages.auditTableMissing(audit.table, audit.cause, auditTableCommand(args)),
    );
  }
  const records = await admin.redrives({ limit: args.limit ?? 20 });
  if (records.length === 0) return { text: 'No re-drive recorded.', json: records };
  const rows = records.map((r) => [
    iso(r.at),
    r.actor,
    clip(r.reason, 40),
    Object.entries(r.filter)
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(' '),
    r.destination ?? '-',
    String(r.count),
    r.redriveId,
  ]);
  return {
    text: table(['AT', 'ACTOR', 'REASON', 'FILTER', 'TO', 'COUNT', 'RE-DRIVE ID'], rows),
    json: records,
  };
}
