import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { PermanentPublishError, type OutboxMessage } from '../../lib';
import { outboxTableDdl, outboxArchiveTableDdl, type OutboxDialect } from '../../lib/schema';
import { RecordingPublisher } from '../../lib/testing';
import { outboxDatabase, tableNamesFor } from '../../lib/store/schema/outbox-table-ddl';
import { typeormSqlPort } from '../../lib/typeorm/typeorm.sql-port';
import { runOutboxCli } from '../../lib/operations/cli/outbox-cli';
import { createChar36Tables, idColumnTypes } from '../support/mysql-char36-tables';
import {
  databaseUrlFor,
  readArchive,
  readAttempts,
  readOutbox,
  storedId,
  TEST_DATABASES,
  uniqueTable,
  type TestDatabase,
} from '../support/databases';
import { dropOutboxTable, quoteTable, type OutboxApp } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { SERVICES, describeWith } from '../support/services';
import { waitFor } from '../support/wait-for';

/** The steps of every option too (`--with`): these specs follow a table through all ten. */
const EVERY_STEP = ['--with', 'sequence,tenants,partitions,claimCheck,erasure'];

// The `outbox` command against real databases: every command's --json answer is checked, and so
// is the table afterwards.
//
// Most commands run in this process through `runOutboxCli`, what the bin (main.ts) runs with the
// process's argv, environment and streams: a child process per command cost a second or more
// each on a loaded machine, for the same code. What only the process shows runs as a child of
// lib/ transpiled once into a temporary directory (what `npm run build` emits for the package's
// bin, without type checking): exit codes and output of a real process, packages missing from
// node_modules, Ctrl-C during --watch, a failure's one line; one test runs main.ts through
// ts-node too.

const root = resolve(__dirname, '../..');

function transpileLib(): string {
  const out = mkdtempSync(join(tmpdir(), 'outbox-cli-'));
  const config = ts.readConfigFile(join(root, 'tsconfig.json'), (p) => ts.sys.readFile(p));
  const { options } = ts.convertCompilerOptionsFromJson(config.config.compilerOptions, root);
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) {
        const { outputText } = ts.transpileModule(readFileSync(path, 'utf8'), {
          compilerOptions: { ...options, sourceMap: false, declaration: false },
          fileName: path,
        });
        const target = join(out, relative(join(root, 'lib'), path)).replace(/\.ts$/, '.js');
        mkdirSync(dirname(target), { recursive: true });
        writeFileSync(target, outputText);
      }
    }
  };
  walk(join(root, 'lib'));
  return out;
}

interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

let built: string;
beforeAll(() => {
  built = transpileLib();
});
afterAll(() => {
  rmSync(built, { recursive: true, force: true });
});

function run(
  command: readonly string[],
  args: readonly string[],
  env: Record<string, string | undefined>,
): Promise<CliRun> {
  const childEnv: Record<string, string> = { NODE_PATH: join(root, 'node_modules') };
  for (const [name, value] of Object.entries({ ...process.env, ...env })) {
    if (value !== undefined && name !== 'NODE_OPTIONS') childEnv[name] = value;
  }
  if (env.DATABASE_URL === undefined) delete childEnv.DATABASE_URL;
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [...command, ...args], {
      cwd: root,
      env: childEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.once('error', fail);
    child.once('close', (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    });
  });
}

/** Runs the CLI in this process with DATABASE_URL (or without, when `url` is undefined). */
async function outbox(args: readonly string[], url?: string): Promise<CliRun> {
  const env: Record<string, string | undefined> = { ...process.env, DATABASE_URL: url };
  if (url === undefined) delete env.DATABASE_URL;
  let stdout = '';
  let stderr = '';
  const code = await runOutboxCli(args, env, {
    stdout: (text) => {
      stdout += text;
    },
    stderr: (text) => {
      stderr += text;
    },
  });
  return { code, stdout, stderr };
}

/** Runs the package's bin as a child process, as an operator runs it. */
const outboxProcess = (args: readonly string[], url?: string): Promise<CliRun> =>
  run([join(built, 'operations/cli/main.js')], args, { DATABASE_URL: url });

/** Runs the CLI and parses its one JSON document; fails with its stderr when it exits non-zero. */
async function outboxJson<T = Record<string, unknown>>(
  args: readonly string[],
  url: string,
): Promise<T> {
  const result = await outbox([...args, '--json'], url);
  if (result.code !== 0)
    throw new Error(`outbox ${args.join(' ')}: ${result.code}: ${result.stderr}`);
  expect(result.stderr).toBe('');
  return JSON.parse(result.stdout) as T;
}

const NO_STACK = /\n\s+at /;

/**
 * A `--require` preload under which these packages are not installed, as in an app that never
 * added them (TypeORM for an app on Prisma or Drizzle). Node resolves every `require`, and the
 * `import()` the compiled CLI turns into one, through `Module._resolveFilename`; failing there
 * with MODULE_NOT_FOUND is what Node itself does for a package missing from node_modules, for
 * the CLI and for anything it loads.
 */
function withoutPackages(names: readonly string[]): string {
  const hook = join(built, `without-${names.join('-')}.js`);
  writeFileSync(
    hook,
    `const Module = require('module');
const hidden = ${JSON.stringify(names)};
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (hidden.some((name) => request === name || request.startsWith(name + '/'))) {
    throw Object.assign(new Error("Cannot find module '" + request + "'"), { code: 'MODULE_NOT_FOUND' });
  }
  return resolve.call(this, request, ...rest);
};`,
  );
  return hook;
}

const dialectOf: Record<TestDatabase['name'], OutboxDialect> = {
  postgres: 'postgres',
  mariadb: 'mysql',
  sqlite: 'sqlite',
};

const msg = (key: string | null, extra: Partial<OutboxMessage> = {}): OutboxMessage => ({
  topic: 'orders',
  type: 'order.created',
  key,
  payload: { key },
  ...extra,
});
const rejected = (text: string) => ({ error: new PermanentPublishError(text) });

describe('outbox CLI without a database', () => {
  it('prints usage for --help, and runs from the TypeScript source too', async () => {
    const help = await run(
      [
        '-r',
        'ts-node/register/transpile-only',
        '-r',
        'tsconfig-paths/register',
        'lib/operations/cli/main.ts',
      ],
      ['--help'],
      {},
    );
    expect(help).toMatchObject({ code: 0, stderr: '' });
    expect(help.stdout).toContain('Usage: outbox <command>');
    expect(help.stdout).toContain('dlq purge <messageId…> | filters | --yes');
    expect(help.stdout).toContain('Exit codes: 0 done; 1 failed, or a message id not found');
  });

  it('prints the DDL of every dialect, for the table and schema asked', async () => {
    for (const dialect of ['postgres', 'mysql', 'sqlite'] as const) {
      const printed = await outboxJson<{ statements: string[] }>(
        ['schema', 'print', '--dialect', dialect, '--table', 'events_out', '--schema', 'ops'],
        '',
      );
      expect(printed.statements).toEqual(
        outboxTableDdl(dialect, { tableName: 'events_out', schema: 'ops' }),
      );
      const withArchive = await outboxJson<{ statements: string[] }>(
        ['schema', 'print', '--dialect', dialect, '--table', 'events_out', '--archive'],
        '',
      );
      expect(withArchive.statements).toEqual([
        ...outboxTableDdl(dialect, { tableName: 'events_out' }),
        ...outboxArchiveTableDdl(dialect, { tableName: 'events_out' }),
      ]);
      expect(
        withArchive.statements.filter((x) => /CREATE TABLE.*events_out_archive/.test(x)),
      ).toHaveLength(1);
    }
    const text = await outbox(['schema', 'print'], 'mariadb://u@h/db');
    expect(text.code).toBe(0);
    expect(text.stdout).toBe(
      `${outboxTableDdl('mysql')
        .map((s) => `${s};`)
        .join('\n\n')}\n`,
    );
  });

  it('prints the DDL without TypeORM installed, and a command whose driver is missing names the package to install', async () => {
    const main = join(built, 'operations/cli/main.js');
    const printed = await run(
      ['-r', withoutPackages(['typeorm']), main],
      ['schema', 'print', '--dialect', 'mysql'],
      {},
    );
    expect(printed.stderr).toBe('');
    expect(printed.code).toBe(0);
    expect(printed.stdout).toBe(
      `${outboxTableDdl('mysql')
        .map((s) => `${s};`)
        .join('\n\n')}\n`,
    );
    // An app on MySQL asked about PostgreSQL: the CLI connects through pg, which is not there.
    const status = await run(
      ['-r', withoutPackages(['typeorm', 'pg']), main],
      ['schema', 'status'],
      {
        DATABASE_URL: 'postgres://postgres:Hunter2-Secret@127.0.0.1:5432/test',
      },
    );
    expect(status.code).toBe(1);
    expect(status.stdout).toBe('');
    expect(status.stderr).toMatch(
      /^outbox: DATABASE_URL names a PostgreSQL database, .*node-postgres .*not installed.*"npm i pg"\); TypeORM is not needed\.\n$/,
    );
    expect(status.stderr).not.toContain('Hunter2-Secret');
  });

  it('refuses bad command lines with exit code 2 and a one-line reason', async () => {
    const cases: [string[], string | undefined, RegExp][] = [
      [[], undefined, /No command given/],
      [['frobnicate'], undefined, /Unknown command "frobnicate"\. "outbox --help" lists every/],
      [
        ['status'],
        undefined,
        /Unknown command "status"\. Did you mean .*"outbox schema status".*"outbox delivery-partitions status"/,
      ],
      [['dlq'], undefined, /needs a subcommand: list, show, retry, purge/],
      [['dlq', 'list', '--yes'], undefined, /--yes does not apply to "outbox dlq list"/],
      [
        ['dlq', 'list', '--bogus'],
        undefined,
        /outbox: Unknown option --bogus \(outbox --help lists them\)/,
      ],
      [
        ['dlq', 'list', '--topc', 'orders'],
        undefined,
        /Unknown option --topc: did you mean --topic\?/,
      ],
      [
        ['dlq', 'list', '--limit', '5000'],
        undefined,
        /--limit must be a whole number from 1 to 1000/,
      ],
      [['dlq', 'list', '--older-than', '7'], undefined, /not a duration/],
      [['dlq', 'list', '--table', 'x; DROP TABLE y'], undefined, /not a safe SQL identifier/],
      [['schema', 'print'], undefined, /--dialect postgres\|mysql\|sqlite, or set DATABASE_URL/],
      [['stats'], undefined, /DATABASE_URL is not set/],
      [['stats'], 'redis://localhost:6379', /unsupported scheme "redis:"/],
      [['stats'], 'postgres://admin:Hunter2-Secret@db.example:notaport/app', /not a valid URL/],
      // What the user typed is named (a flag, or DATABASE_URL), never the option of the module
      // behind it (schemaHistoryBootstrapServers, database.dbname, topicPrefix, partitioning …).
      [
        ['cdc', 'debezium', '--connector', 'mysql'],
        'mysql://admin:Hunter2-Secret@db.example:3306/shop',
        /--connector mysql needs --bootstrap-servers HOST:PORT.*e\.g\. --bootstrap-servers kafka:9092/,
      ],
      [
        ['cdc', 'debezium', '--connector', 'mariadb', '--bootstrap-servers', 'kafka:9092'],
        'mariadb://admin:Hunter2-Secret@db.example:3306/my-shop',
        /DATABASE_URL names the database "my-shop".*letters, digits or underscores/,
      ],
      [
        ['cdc', 'debezium', '--connector', 'mysql', '--bootstrap-servers', 'kafka:9092'],
        'mysql://admin:Hunter2-Secret@db.example:3306/sh%ZZop',
        /DATABASE_URL has a badly percent-encoded database name/,
      ],
      [
        ['cdc', 'debezium', '--connector', 'postgres', '--topic-prefix', 'shop events'],
        'postgres://admin:Hunter2-Secret@db.example:5432/shop',
        /--topic-prefix "shop events" is not a Kafka topic prefix: use 1 to 200 letters, digits/,
      ],
      [
        ['cdc', 'debezium', '--connector', 'postgres', '--name', 'orders/outbox'],
        'postgres://admin:Hunter2-Secret@db.example:5432/shop',
        /--name "orders\/outbox" is not a connector name: use 1 to 200 letters, digits/,
      ],
      [
        [
          'cdc',
          'debezium',
          '--connector',
          'mysql',
          '--bootstrap-servers',
          'kafka:9092',
          '--server-id',
          '9999999999',
        ],
        'mysql://admin:Hunter2-Secret@db.example:3306/shop',
        /--server-id must be a whole number from 1 to 4294967295/,
      ],
      [
        ['schema', 'print', '--dialect', 'sqlite', '--partition-by', 'day'],
        undefined,
        /--partition-by: sqlite has no partitioned tables.*leave --partition-by out/,
      ],
      [
        ['stats', '--watch', '--interval', '30d'],
        'sqlite:unused.db',
        /--interval must be from 100ms to 1d/,
      ],
    ];
    const results = await Promise.all(cases.map(([args, url]) => outbox(args, url)));
    results.forEach((result, i) => {
      const [, , reason] = cases[i] as [string[], string | undefined, RegExp];
      expect(result.code).toBe(2);
      expect(result.stdout).toBe('');
      expect(result.stderr).toMatch(reason);
      expect(result.stderr).toMatch(/^outbox: .*\nRun "outbox --help" for usage\.\n$/);
      expect(result.stderr).not.toContain('Hunter2-Secret');
      expect(result.stderr).not.toMatch(/option "|OutboxModule|debeziumConnectorConfig/);
    });
  });
});

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `outbox CLI on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_cli' });
    // The table the CLI makes in the first test; the app on it serves the tests after it.
    const table = uniqueTable('outbox_cli');
    let url: string;
    let app: OutboxApp<RecordingPublisher>;

    beforeAll(() => {
      url = databaseUrlFor(db, scope.ds);
      scope.defer(() => dropOutboxTable(scope.ds, table), 'block');
    });

    const rows = () => readOutbox(scope.ds, table);
    const statusOf = async (messageId: string) =>
      (await rows()).find((r) => r.messageId === messageId)?.status;
    const statusOfIn = async (other: string, messageId: string) =>
      (await readOutbox(scope.ds, other)).find((r) => r.messageId === messageId)?.status;

    it('schema migrate --binary-ids converts a CHAR(36) table in place on MySQL/MariaDB, and is refused elsewhere', async () => {
      const old = uniqueTable('outbox_clid');
      if (db.name !== 'mariadb') {
        const refused = await outbox(['schema', 'migrate', '--binary-ids', '--table', old], url);
        expect(refused.code).not.toBe(0);
        expect(refused.stderr).toMatch(/--binary-ids/);
        expect(refused.stderr).not.toMatch(NO_STACK);
        return;
      }
      scope.defer(() => dropOutboxTable(scope.ds, old));
      const sql = typeormSqlPort(scope.ds);
      await createChar36Tables(sql, old);
      const id = randomUUID();
      await scope.ds.query(
        `INSERT INTO \`${old}\` (message_id, topic, event_type, payload, headers) VALUES (?, 'orders', 't', '{}', '{}')`,
        [id],
      );
      const status = await outbox(['schema', 'status', '--table', old], url);
      expect(status.stdout).toMatch(/Message ids: CHAR\(36\) .*--binary-ids/);
      const migrated = await outbox(['schema', 'migrate', '--binary-ids', '--table', old], url);
      expect(migrated.code).toBe(0);
      expect(migrated.stdout).toContain(`Converted the message ids of \`${old}\``);
      expect(Object.values(await idColumnTypes(sql, old))).toEqual(
        expect.arrayContaining(['binary(16)']),
      );
      expect(Object.values(await idColumnTypes(sql, old))).not.toContain('char(36)');
      const [row] = await scope.ds.query<{ id: string }[]>(
        `SELECT LOWER(HEX(message_id)) AS id FROM \`${old}\``,
      );
      expect(row?.id).toBe(id.replace(/-/g, ''));
      const again = await outbox(['schema', 'migrate', '--binary-ids', '--table', old], url);
      expect(again.stdout).toContain('Its message ids are BINARY(16) already.');
    });

    it('schema migrate creates the table once, then finds it up to date', async () => {
      // Before: nothing there, and status says what migrate would make.
      const none = await outbox(['schema', 'status', '--table', table, ...EVERY_STEP], url);
      expect(none.code).toBe(0);
      expect(none.stdout).toMatch(/schema version 0 of 11\./);
      expect(none.stdout).toMatch(
        /1 {2}table +missing: the table does not exist: migrate creates it/,
      );
      expect(none.stdout).toContain(
        `Run "outbox schema migrate --with sequence,tenants,partitions,claimCheck,erasure" (same DATABASE_URL, --table), or run the DataSource's ...outboxMigrations({ with: ['sequence', 'tenants', 'partitions', 'claimCheck', 'erasure'] })`,
      );
      expect(none.stdout).toContain(
        'if the app sets tableName or schema, pass the same --table and --schema',
      );

      const created = await outboxJson(['schema', 'migrate', '--table', table, ...EVERY_STEP], url);
      expect(created).toEqual({
        dialect: dialectOf[db.name],
        table,
        schema: null,
        created: true,
        historyCreated: true,
        archiveCreated: false,
      });
      expect(await rows()).toEqual([]);
      const again = await outbox(['schema', 'migrate', '--table', table, ...EVERY_STEP], url);
      expect(again.code).toBe(0);
      expect(again.stdout).toMatch(/already exists and is up to date; nothing changed/);
      expect(
        await outboxJson(['schema', 'status', '--table', table, ...EVERY_STEP], url),
      ).toMatchObject({
        version: 11,
        latest: 11,
        upToDate: true,
        parts: [
          { step: 1, part: 'table', present: true, missing: null },
          { step: 2, part: 'attempt-history', present: true, missing: null },
          { step: 3, part: 'cleaner-indexes', present: true, missing: null },
          { step: 4, part: 'payload-columns', present: true, missing: null },
          { step: 5, part: 'waiting-index', present: true, missing: null },
          { step: 6, part: 'key-sequence', present: true, missing: null },
          { step: 7, part: 'tenant-column', present: true, missing: null },
          { step: 8, part: 'fallback-outcome', present: true, missing: null },
          { step: 9, part: 'delivery-partitions', present: true, missing: null },
          { step: 10, part: 'claim-checks', present: true, missing: null },
          { step: 11, part: 'subject-keys', present: true, missing: null },
        ],
      });

      // A table made before the cleaner's indexes: status names them, migrate adds them.
      const names = tableNamesFor(dialectOf[db.name], { tableName: table });
      await outboxDatabase(dialectOf[db.name]).schema.cleanerIndexes.drop(
        (sql, params) => scope.ds.query(sql, params),
        names,
      );
      const noIndexes = await outbox(['schema', 'status', '--table', table, ...EVERY_STEP], url);
      expect(noIndexes.stdout).toMatch(/schema version 2 of 11\./);
      expect(noIndexes.stdout).toMatch(
        /3 {2}cleaner-indexes +missing: the cleaner's cut-off indexes/,
      );
      const indexed = await outbox(['schema', 'migrate', '--table', table, ...EVERY_STEP], url);
      expect(indexed.stdout).toMatch(/already exists; added the cleaner's indexes\./);
      expect(
        await outboxJson(['schema', 'status', '--table', table, ...EVERY_STEP], url),
      ).toMatchObject({
        version: 11,
      });

      // A version-3 table (before binary payloads): status names step 4, the app refuses it
      // naming the command, migrate adds the columns in place.
      await outboxDatabase(dialectOf[db.name]).schema.payloadColumns.drop(
        (sql, params) => scope.ds.query(sql, params),
        names,
      );
      const v3 = await outbox(['schema', 'status', '--table', table, ...EVERY_STEP], url);
      expect(v3.stdout).toMatch(/schema version 3 of 11\./);
      expect(v3.stdout).toMatch(/4 {2}payload-columns +missing: the binary-payload/);
      const refusedV3 = await outbox(['dlq', 'list', '--table', table], url);
      expect(refusedV3.code).toBe(1);
      expect(refusedV3.stderr).toMatch(/schema step 4 adds/);
      expect(refusedV3.stderr).toContain('Run "outbox schema migrate" with the same --table');
      const columns = await outbox(['schema', 'migrate', '--table', table, ...EVERY_STEP], url);
      expect(columns.stdout).toMatch(
        /already exists; added the binary-payload and broker-attribute columns \(step 4\)\./,
      );
      expect(
        await outboxJson(['schema', 'status', '--table', table, ...EVERY_STEP], url),
      ).toMatchObject({
        version: 11,
        upToDate: true,
      });

      // A version-4 table (before the index of waiting messages): on PostgreSQL, status names
      // step 5 and migrate adds the index; the other databases have nothing to add.
      const waiting = outboxDatabase(dialectOf[db.name]).schema.waitingIndex;
      expect(waiting === undefined).toBe(db.name !== 'postgres');
      if (waiting !== undefined) {
        await waiting.drop((sql, params) => scope.ds.query(sql, params), names);
        const v4 = await outbox(['schema', 'status', '--table', table, ...EVERY_STEP], url);
        expect(v4.stdout).toMatch(/schema version 4 of 11\./);
        expect(v4.stdout).toMatch(/5 {2}waiting-index +missing: the index of waiting messages/);
        const added = await outbox(['schema', 'migrate', '--table', table, ...EVERY_STEP], url);
        expect(added.stdout).toMatch(
          /already exists; added the index of waiting messages \(step 5\)\./,
        );
        expect(
          await outboxJson(['schema', 'status', '--table', table, ...EVERY_STEP], url),
        ).toMatchObject({
          version: 11,
          upToDate: true,
        });
      }

      // A version-5 table (before sequence numbers): status names step 6, migrate adds them.
      await outboxDatabase(dialectOf[db.name]).schema.keySequence?.drop(
        (sql, params) => scope.ds.query(sql, params),
        names,
      );
      const v5 = await outbox(['schema', 'status', '--table', table, ...EVERY_STEP], url);
      expect(v5.stdout).toMatch(/schema version 5 of 11\./);
      expect(v5.stdout).toMatch(/6 {2}key-sequence +missing: the sequence column key_seq/);
      const sequenced = await outbox(['schema', 'migrate', '--table', table, ...EVERY_STEP], url);
      expect(sequenced.stdout).toMatch(
        /already exists; added the key_seq column and the per-key sequence counters \(step 6\)\./,
      );
      expect(
        await outboxJson(['schema', 'status', '--table', table, ...EVERY_STEP], url),
      ).toMatchObject({
        version: 11,
        upToDate: true,
      });

      // A version-7 table (its history refuses the 'fallback' outcome): status names step 8,
      // migrate widens the check in place.
      await outboxDatabase(dialectOf[db.name]).schema.fallbackOutcome?.drop(
        (sql, params) => scope.ds.query(sql, params),
        names,
      );
      const v7 = await outbox(['schema', 'status', '--table', table, ...EVERY_STEP], url);
      expect(v7.stdout).toMatch(/schema version 7 of 11\./);
      expect(v7.stdout).toMatch(
        /8 {2}fallback-outcome +missing: .* refuses the 'fallback' outcome/,
      );
      const widened = await outbox(['schema', 'migrate', '--table', table, ...EVERY_STEP], url);
      expect(widened.stdout).toMatch(
        /already exists; let the attempt history record fallback runs \(the 'fallback' outcome, step 8\)\./,
      );
      expect(
        await outboxJson(['schema', 'status', '--table', table, ...EVERY_STEP], url),
      ).toMatchObject({
        version: 11,
        upToDate: true,
      });

      // A table made before the history has none: the command adds it in place.
      await scope.ds.query(`DROP TABLE ${quoteTable(scope.ds, `${table}_attempts`)}`);
      const refused = await outbox(['dlq', 'list', '--table', table], url);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/attempt-history table .* cannot be read/);
      expect(
        await outboxJson(['schema', 'status', '--table', table, ...EVERY_STEP], url),
      ).toMatchObject({
        version: 1,
        upToDate: false,
      });
      const upgraded = await outbox(['schema', 'migrate', '--table', table, ...EVERY_STEP], url);
      expect(upgraded.code).toBe(0);
      expect(upgraded.stdout).toMatch(/already exists; added its attempt history/);
      await readAttempts(scope.ds, table);

      if (db.name === 'mariadb') {
        // A table made before 0.3 (PAD SPACE columns): there, but refused. Status says so (not
        // that there is no table), and migrate says what it changed.
        await scope.ds.query(
          `ALTER TABLE ${quoteTable(scope.ds, table)} MODIFY topic VARCHAR(255) COLLATE utf8mb4_bin NOT NULL, MODIFY message_key VARCHAR(255) COLLATE utf8mb4_bin NULL, MODIFY event_type VARCHAR(255) COLLATE utf8mb4_bin NOT NULL`,
        );
        const padded = await outbox(['schema', 'status', '--table', table, ...EVERY_STEP], url);
        expect(padded.stdout).toMatch(/schema version 0 of 11\./);
        expect(padded.stdout).toMatch(/1 {2}table +missing: .*PAD SPACE/);
        expect(padded.stdout).not.toContain('There is no table');
        expect(
          await outboxJson(['schema', 'status', '--table', table, ...EVERY_STEP], url),
        ).toMatchObject({
          version: 0,
          tableExists: true,
        });
        const fixed = await outbox(['schema', 'migrate', '--table', table, ...EVERY_STEP], url);
        expect(fixed.stdout).toMatch(
          /already exists; brought the table itself up to date \(topic, message_key, event_type compare ignoring trailing spaces/,
        );
        expect(
          await outboxJson(['schema', 'status', '--table', table, ...EVERY_STEP], url),
        ).toMatchObject({
          version: 11,
          upToDate: true,
        });
      }

      // The app runs on the table the CLI made.
      app = await scope.openShared({
        table,
        publisher: new RecordingPublisher(),
        options: {
          retry: { initialDelayMs: 60_000, maxDelayMs: 60_000, jitter: 0 },
          dispatcher: { listen: false },
        },
      });
    });

    it('runs without TypeORM installed, on the driver DATABASE_URL names: schema status, dlq list and purge', async () => {
      const [dead] = (await app.enqueue([msg('no-typeorm')])) as [string];
      app.publisher.fail(dead, 'permanent', rejected('no typeorm here'));
      await app.dispatcher.drain();
      app.publisher.heal();
      const noTypeorm = ['-r', withoutPackages(['typeorm']), join(built, 'operations/cli/main.js')];
      const cli = (args: string[]) =>
        run(noTypeorm, [...args, '--table', table, '--json'], { DATABASE_URL: url });

      const status = await cli(['schema', 'status']);
      expect(status).toMatchObject({ code: 0, stderr: '' });
      expect(JSON.parse(status.stdout)).toMatchObject({
        dialect: dialectOf[db.name],
        tableExists: true,
        upToDate: true,
      });
      if (db.name === 'sqlite') {
        // Prisma's form of a SQLite URL, with one of its options.
        const prismaUrl = `file:${url.slice('sqlite:'.length)}?connection_limit=1`;
        const viaFile = await run(noTypeorm, ['schema', 'status', '--table', table, '--json'], {
          DATABASE_URL: prismaUrl,
        });
        expect(viaFile).toMatchObject({ code: 0, stderr: '' });
        expect(JSON.parse(viaFile.stdout)).toMatchObject({ tableExists: true, upToDate: true });
      }
      const list = await cli(['dlq', 'list']);
      expect(list).toMatchObject({ code: 0, stderr: '' });
      expect(
        (JSON.parse(list.stdout) as { items: { messageId: string; lastError: string }[] }).items,
      ).toEqual([
        expect.objectContaining({
          messageId: dead,
          lastError: expect.stringContaining('no typeorm here') as unknown,
        }),
      ]);
      const purged = await cli(['dlq', 'purge', dead]);
      expect(purged).toMatchObject({ code: 0, stderr: '' });
      expect(JSON.parse(purged.stdout)).toEqual({ deleted: 1 });
      expect(await statusOf(dead)).toBeUndefined();
    });

    let ids: Record<'a1' | 'a2' | 'b1' | 'b2' | 'bill1' | 'bill2' | 'ok', string>;

    it('dlq list and show: filters, pages and the full message', async () => {
      const [a1, a2, b1, b2, bill1, bill2, ok] = (await app.enqueue([
        msg('a'),
        msg('a'),
        msg('b'),
        msg('b'),
        msg(null, { topic: 'billing', type: 'invoice.sent', headers: { tenant: 't-9' } }),
        msg(null, { topic: 'billing', type: 'invoice.sent' }),
        msg('c'),
      ])) as [string, string, string, string, string, string, string];
      ids = { a1, a2, b1, b2, bill1, bill2, ok };
      app.publisher
        .fail(a1, 'permanent', rejected('Schema REJECTED by broker'))
        .fail(b1, 'permanent', rejected('message too large'))
        .fail({ topic: 'billing' }, 'permanent', rejected('billing topic rejected'));
      await app.dispatcher.drain();
      expect(app.publisher.messageIds).toEqual([ok]);

      type Page = { items: { messageId: string }[]; nextCursor: string | null };
      const list = async (...args: string[]) =>
        (await outboxJson<Page>(['dlq', 'list', '--table', table, ...args], url)).items.map(
          (m) => m.messageId,
        );
      const [all, billing, byKey, byError, byType, old] = await Promise.all([
        list(),
        list('--topic', 'billing'),
        list('--key', 'b'),
        list('--error', 'rejected'),
        list('--type', 'invoice.sent'),
        list('--older-than', '1h'),
      ]);
      expect(all).toEqual([a1, b1, bill1, bill2]);
      expect(billing).toEqual([bill1, bill2]);
      expect(byKey).toEqual([b1]);
      expect(byError).toEqual([a1, bill1, bill2]);
      expect(byType).toEqual([bill1, bill2]);
      expect(old).toEqual([]);

      const first = await outboxJson<Page>(['dlq', 'list', '--table', table, '--limit', '3'], url);
      expect(first.items.map((m) => m.messageId)).toEqual([a1, b1, bill1]);
      expect(first.nextCursor).not.toBeNull();
      const next = await outboxJson<Page>(
        ['dlq', 'list', '--table', table, '--limit', '3', '--after', first.nextCursor as string],
        url,
      );
      expect(next).toEqual({
        items: [expect.objectContaining({ messageId: bill2 })],
        nextCursor: null,
      });

      const text = await outbox(['dlq', 'list', '--table', table, '--limit', '3'], url);
      expect(text.code).toBe(0);
      expect(text.stdout).toMatch(/^ID +MESSAGE ID +TOPIC +KEY +TYPE +ATTEMPTS +AGE +LAST ERROR\n/);
      expect(text.stdout).toContain(a1);
      expect(text.stdout).toContain('Schema REJECTED by broker');
      expect(text.stdout).toContain(`3 dead letters; next page: --after ${first.nextCursor}`);

      const shown = await outboxJson<Record<string, unknown>>(
        ['dlq', 'show', bill1, '--table', table],
        url,
      );
      expect(shown).toMatchObject({
        messageId: bill1,
        status: 'dead',
        topic: 'billing',
        key: null,
        type: 'invoice.sent',
        attempts: 1,
        payload: { key: null },
        headers: { tenant: 't-9' },
        lockedBy: null,
        lockToken: null,
      });
      expect(shown.lastError).toContain('billing topic rejected');
      expect(typeof shown.deadAt).toBe('string');
      expect(shown.attemptHistory).toEqual([
        {
          attempt: 1,
          outcome: 'dead',
          failedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) as unknown,
          lockedBy: app.instanceId ?? expect.any(String),
          errorClass: 'PermanentPublishError',
          error: shown.lastError,
        },
      ]);
      const showText = await outbox(['dlq', 'show', a1.toUpperCase(), '--table', table], url);
      expect(showText.code).toBe(0);
      expect(showText.stdout).toMatch(/^message id +[0-9a-f-]{36}\n/);
      expect(showText.stdout).toMatch(
        /\nlast error +PermanentPublishError: Schema REJECTED by broker\n/,
      );
      expect(showText.stdout).toMatch(
        /\nattempt history\n +attempt +outcome +failed at +dispatcher +error class +error\n +1 +dead +\S+Z +\S+ +PermanentPublishError +PermanentPublishError: Schema REJECTED by broker\n/,
      );

      const missing = await outbox(
        ['dlq', 'show', '0190a4f1-0000-7000-8000-000000000000', '--table', table],
        url,
      );
      expect(missing).toMatchObject({ code: 1, stdout: '' });
      expect(missing.stderr).toMatch(
        new RegExp(
          `^outbox: No message 0190a4f1-0000-7000-8000-000000000000 in the outbox table ${table}: never enqueued in it, or deleted since [^\\n]*\\n$`,
        ),
      );
    });

    it('dlq retry by id and by filter; the app then delivers each key in order', async () => {
      const none = await outbox(['dlq', 'retry', '--table', table], url);
      expect(none.code).toBe(2);
      expect(none.stderr).toMatch(/Name the dead letters to retry/);

      app.publisher.heal();
      expect(await outboxJson(['dlq', 'retry', ids.a1, '--table', table], url)).toEqual({
        retried: 1,
        requeued: 1,
        resequenced: 0,
        expired: [],
      });
      expect(await statusOf(ids.a1)).toBe('pending');
      expect(await statusOf(ids.a2)).toBe('waiting');
      expect(
        await outboxJson(['dlq', 'retry', '--topic', 'billing', '--table', table], url),
      ).toEqual({ retried: 2, requeued: 2, resequenced: 0, expired: [] });
      await app.dispatcher.drain();
      expect(app.publisher.messageIds).toEqual([ids.ok, ids.a1, ids.bill1, ids.bill2, ids.a2]);
      expect((await rows()).map((r) => [r.messageId, r.status, r.attempts])).toEqual([
        [ids.a1, 'delivered', 1],
        [ids.a2, 'delivered', 1],
        [ids.b1, 'dead', 1],
        [ids.b2, 'waiting', 0],
        [ids.bill1, 'delivered', 1],
        [ids.bill2, 'delivered', 1],
        [ids.ok, 'delivered', 1],
      ]);
    });

    it('stats and blocked report what the table holds', async () => {
      const stats = await outboxJson(['stats', '--table', table], url);
      expect(stats).toEqual({
        pending: 0,
        waiting: 1,
        leased: 0,
        delivered: 5,
        dead: 1,
        oldestPendingAgeMs: expect.any(Number),
        delivery: 'dispatcher',
        byTopic: [
          { topic: 'billing', pending: 0, waiting: 0, leased: 0, delivered: 2, dead: 0 },
          { topic: 'orders', pending: 0, waiting: 1, leased: 0, delivered: 3, dead: 1 },
        ],
      });
      const statsText = await outbox(['stats', '--table', table], url);
      expect(statsText.stdout).toMatch(/STATUS +COUNT\npending +0\nwaiting +1\n/);
      expect(statsText.stdout).toMatch(/\norders +0 +1 +0 +3 +1\n/);

      const blocked = await outboxJson<{ items: unknown[] }>(['blocked', '--table', table], url);
      expect(blocked.items).toEqual([
        expect.objectContaining({
          key: 'b',
          headMessageId: ids.b1,
          headStatus: 'dead',
          waiting: 1,
        }),
      ]);
      const text = await outbox(['blocked', '--table', table], url);
      expect(text.stdout).toMatch(/^KEY +HEAD MESSAGE ID +HEAD +ATTEMPTS +WAITING/);
      expect(text.stdout).toContain(ids.b1);
    });

    it('dlq purge refuses to empty the dead letters without --yes, and purges by filter and id', async () => {
      const refused = await outbox(['dlq', 'purge', '--table', table], url);
      expect(refused).toMatchObject({ code: 2, stdout: '' });
      expect(refused.stderr).toMatch(/Refusing to delete every dead letter without --yes/);
      expect(await statusOf(ids.b1)).toBe('dead');
      // An age alone can reach every dead letter too.
      const byAge = await outbox(['dlq', 'purge', '--older-than', '0s', '--table', table], url);
      expect(byAge).toMatchObject({ code: 2, stdout: '' });
      expect(byAge.stderr).toMatch(/Refusing to delete by age alone without --yes/);
      const cleanupDead = await outbox(
        ['cleanup', '--once', '--dead-retention', '0', '--table', table],
        url,
      );
      expect(cleanupDead).toMatchObject({ code: 2, stdout: '' });
      expect(cleanupDead.stderr).toMatch(/Refusing to delete dead letters by age without --yes/);
      expect(await statusOf(ids.b1)).toBe('dead');

      // By filter: b's dead head goes, and its follower may go now.
      expect(await outboxJson(['dlq', 'purge', '--key', 'b', '--table', table], url)).toEqual({
        deleted: 1,
      });
      expect(await statusOf(ids.b1)).toBeUndefined();
      expect(await statusOf(ids.b2)).toBe('pending');
      await app.dispatcher.drain();
      expect(await statusOf(ids.b2)).toBe('delivered');

      const [d1, d2, d3] = (await app.enqueue([msg('d'), msg('e'), msg('f')])) as [
        string,
        string,
        string,
      ];
      app.publisher.fail(() => true, 'permanent', rejected('down the drain'));
      await app.dispatcher.drain();
      app.publisher.heal();
      expect(await outboxJson(['dlq', 'purge', d1, '--table', table], url)).toEqual({ deleted: 1 });
      expect(await outboxJson(['dlq', 'purge', '--yes', '--table', table], url)).toEqual({
        deleted: 2,
      });
      const left = await rows();
      expect(left.filter((r) => r.status === 'dead')).toEqual([]);
      expect(left.filter((r) => [d1, d2, d3].includes(r.messageId))).toEqual([]);
    });

    it('why explains each state of a message, and stats --watch redraws until interrupted', async () => {
      const [w1, w2, r1, d1] = (await app.enqueue([
        msg('why-w'),
        msg('why-w'),
        msg('why-r'),
        msg('why-d'),
      ])) as [string, string, string, string];
      app.publisher
        .fail(w1, 'permanent', rejected('why refused'))
        .fail(r1, 'retryable', { times: 1, error: new Error('why flaky') });
      await app.dispatcher.drain();
      app.publisher.heal();
      type Why = { state: string; reason: string; head: { messageId: string } | null };
      const why = (id: string) => outboxJson<Why>(['why', id, '--table', table], url);
      expect(await why(w1)).toMatchObject({
        state: 'dead',
        reason: expect.stringMatching(/why refused/) as unknown,
      });
      expect(await why(w2)).toMatchObject({ state: 'parked', head: { messageId: w1 } });
      expect(await why(r1)).toMatchObject({
        state: 'scheduled',
        reason: expect.stringMatching(/Due at .*why flaky/) as unknown,
      });
      expect(await why(d1)).toMatchObject({ state: 'delivered' });
      const text = await outbox(['why', w2, '--table', table], url);
      expect(text.stdout).toMatch(new RegExp(`^parked: Parked behind ${w1} \\(dead\\)`));

      // Two frames of stats --watch, then Ctrl-C: it stops cleanly.
      const childEnv: Record<string, string> = { NODE_PATH: join(root, 'node_modules') };
      for (const [name, value] of Object.entries({ ...process.env, DATABASE_URL: url }))
        if (value !== undefined && name !== 'NODE_OPTIONS') childEnv[name] = value;
      const child = spawn(
        process.execPath,
        [
          join(built, 'operations/cli/main.js'),
          'stats',
          '--watch',
          '--interval',
          '200ms',
          '--table',
          table,
        ],
        { cwd: root, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      const closed = new Promise<number | null>((resolve) => child.once('close', resolve));
      await waitFor('two frames', () => (out.match(/^STATUS +COUNT/gm) ?? []).length >= 2, {
        timeoutMs: 20_000,
      });
      child.kill('SIGINT');
      expect(await closed).toBe(0);
      expect(out).toMatch(/^\d{4}-\d{2}-\d{2}T/m);

      // Leave the table as the later tests expect it.
      const param = (i: number) => (db.name === 'postgres' ? `$${i}` : '?');
      await scope.ds.query(
        `DELETE FROM ${quoteTable(scope.ds, table)} WHERE message_id IN (${[1, 2, 3, 4].map(param).join(', ')})`,
        [w1, w2, r1, d1].map((id) => storedId(db.name, id)),
      );
    });

    it('a message id that is not found fails with exit code 1 and says so on stderr: why, dlq show, retry and purge', async () => {
      const unknown = '0190a6b2-1c3d-7e4f-8a9b-0c1d2e3f4aff';
      const notFound = new RegExp(
        `^outbox: No message ${unknown} in the outbox table ${table}: never enqueued in it, or deleted since .*\\n$`,
      );
      for (const command of [['why'], ['dlq', 'show']]) {
        for (const json of [[], ['--json']]) {
          const result = await outbox([...command, unknown, '--table', table, ...json], url);
          expect(result).toMatchObject({ code: 1, stdout: '' });
          expect(result.stderr).toMatch(notFound);
        }
      }

      // Several ids: those that are dead letters are retried or purged, the others reported.
      const [dead, other] = (await app.enqueue([msg('nf-dead'), msg('nf-other')])) as [
        string,
        string,
      ];
      app.publisher.fail(dead, 'permanent', rejected('not found test'));
      await app.dispatcher.drain();
      app.publisher.heal();
      const retried = await outbox(['dlq', 'retry', dead, unknown, '--table', table], url);
      expect(retried).toMatchObject({
        code: 1,
        stdout: 'Retried 1 dead letter.\n',
        stderr: `outbox: Not dead letters, so not retried: ${unknown} (no such message).\n`,
      });
      expect(await statusOf(dead)).toBe('pending');
      const purged = await outbox(['dlq', 'purge', other, '--table', table, '--json'], url);
      expect(purged.code).toBe(1);
      expect(JSON.parse(purged.stdout)).toEqual({
        deleted: 0,
        notDeadLetters: [{ messageId: other, status: 'delivered' }],
      });
      expect(purged.stderr).toBe(
        `outbox: Not dead letters, so not deleted: ${other} (delivered).\n`,
      );
      expect(await statusOf(other)).toBe('delivered');

      await app.dispatcher.drain();
      const param = (i: number) => (db.name === 'postgres' ? `$${i}` : '?');
      await scope.ds.query(
        `DELETE FROM ${quoteTable(scope.ds, table)} WHERE message_id IN (${param(1)}, ${param(2)})`,
        [dead, other].map((id) => storedId(db.name, id)),
      );
    });

    it('leases lists a claim whose lease expired', async () => {
      const [stuck] = (await app.enqueue([msg('lease')])) as [string];
      const claim = await app.store.claim({ limit: 10, owner: 'crashed-pod-7', leaseMs: 200 });
      expect(claim.records.map((r) => r.messageId)).toEqual([stuck]);
      type Leases = { items: { messageId: string; lockedBy: string; leaseExpired: boolean }[] };
      const found = await waitFor('the CLI to report the expired lease', async () => {
        const page = await outboxJson<Leases>(['leases', '--table', table], url);
        return page.items.length > 0 ? page : null;
      });
      expect(found.items).toEqual([
        expect.objectContaining({
          messageId: stuck,
          lockedBy: 'crashed-pod-7',
          leaseExpired: true,
        }),
      ]);
      const text = await outbox(['leases', '--table', table, '--longer-than', '100ms'], url);
      expect(text.stdout).toMatch(/crashed-pod-7 +expired/);
      await app.dispatcher.drain();
      expect(await statusOf(stuck)).toBe('delivered');
    });

    // Issue 75, item 18: the dispatchers' delivery partitions, under a name of their own.
    it('delivery-partitions status: who delivers by partitions, or why they are not in use; partitions status points there', async () => {
      const other = await scope.table('outbox_cdp');
      type View = {
        inUse: boolean;
        reason?: string;
        message?: string;
        total?: number;
        unowned?: number;
        dispatchers?: { instanceId: string; state: string; partitions: number; share: number }[];
        partitions?: { partition: number; owner: string; generation: number; since: string }[];
        moves?: { total: number; lastAt: string };
      };
      const args = ['delivery-partitions', 'status', '--table', other];
      const unused = await outboxJson<View>(args, url);
      expect(unused).toEqual({
        inUse: false,
        reason: db.name === 'postgres' ? 'no-dispatcher' : 'database',
        message: expect.stringMatching(/^Delivery partitions are not in use on /) as string,
      });
      const text = await outbox(args, url);
      expect(text.code).toBe(0);
      expect(text.stdout).toBe(`${unused.message ?? ''}\n`);
      const sub = await outbox(['delivery-partitions'], url);
      expect(sub.code).toBe(2);
      expect(sub.stderr).toContain('"outbox delivery-partitions" needs a subcommand: status.');
      if (db.name === 'sqlite') return; // no time partitions either (a usage error)
      const timePartitions = await outbox(['partitions', 'status', '--table', other], url);
      expect(timePartitions.code).toBe(1);
      expect(timePartitions.stderr).toContain('"outbox delivery-partitions status"');
      if (db.name !== 'postgres') return;

      await scope.open({
        table: other,
        publisher: new RecordingPublisher(),
        options: {
          autoStart: true,
          instanceId: 'cli-p',
          dispatcher: { claims: 'partitions', partitionTimeoutMs: 3_000 },
        },
      });
      const view = await waitFor('the dispatcher holding every partition', async () => {
        const found = await outboxJson<View>(args, url);
        return found.inUse && found.unowned === 0 ? found : null;
      });
      expect(view).toMatchObject({
        total: 256,
        dispatchers: [{ instanceId: 'cli-p', state: 'delivering', partitions: 256, share: 1 }],
        moves: { total: 256 },
      });
      expect(view.partitions).toHaveLength(256);
      const shown = await outbox(args, url);
      expect(shown.code).toBe(0);
      expect(shown.stdout).toContain(
        `Delivery partitions of ${quoteTable(scope.ds, other)} (dispatcher.claims: 'partitions'): 256, held by 1 dispatcher, 0 free.`,
      );
      expect(shown.stdout).toMatch(
        /\ncli-p#[0-9a-f]+ +cli-p +delivering +[0-9]+ms ago +3s +256 +100% +0-255 /,
      );
      expect(shown.stdout).toMatch(/\nMoves: 256 takes since the tables were made\. /);
      expect(shown.stdout).toMatch(
        /\nAT +TO +PARTITIONS +RANGES\n[0-9T:.-]+Z +cli-p#[0-9a-f]+ +256 +0-255\n?$/,
      );
    });

    it('cleanup --once deletes delivered and dead rows past retention', async () => {
      const usage = await outbox(['cleanup', '--table', table], url);
      expect(usage.code).toBe(2);
      expect(usage.stderr).toMatch(/pass --once/);

      const [dead] = (await app.enqueue([msg('z')])) as [string];
      app.publisher.fail(dead, 'permanent', rejected('no'));
      await app.dispatcher.drain();
      const delivered = (await rows()).filter((r) => r.status === 'delivered').length;
      expect(delivered).toBeGreaterThan(0);

      // The default retention (1d) keeps everything this young.
      expect(await outboxJson(['cleanup', '--once', '--table', table], url)).toEqual({
        delivered: 0,
        dead: null,
        archived: false,
      });

      // --archive moves rows instead, once the archive table exists.
      const archiveArgs = ['cleanup', '--once', '--delivered-retention', '0', '--archive'];
      const noArchive = await outbox([...archiveArgs, '--table', table], url);
      expect(noArchive.code).toBe(1);
      expect(noArchive.stderr).toMatch(
        /archive table .* cannot be read .*schema migrate --archive/,
      );
      const made = await outbox(['schema', 'migrate', '--archive', '--table', table], url);
      expect(made.stdout).toMatch(/up to date; nothing changed\. Created its archive /);
      expect(await outboxJson([...archiveArgs, '--table', table], url)).toEqual({
        delivered,
        dead: null,
        archived: true,
      });
      expect((await readArchive(scope.ds, table)).map((r) => r.status)).toEqual(
        Array.from({ length: delivered }, () => 'delivered'),
      );
      expect((await rows()).map((r) => r.messageId)).toEqual([dead]);

      // Without --archive, dead letters past --dead-retention are deleted.
      expect(
        await outboxJson(
          [
            'cleanup',
            '--once',
            '--delivered-retention',
            '0',
            '--dead-retention',
            '0',
            '--yes',
            '--table',
            table,
          ],
          url,
        ),
      ).toEqual({ delivered: 0, dead: 1, archived: false });
      expect(await rows()).toEqual([]);
      expect(await readArchive(scope.ds, table)).toHaveLength(delivered);
    });

    it('--tenant filters dlq list and stats by the tenant_id column', async () => {
      const t = await scope.open({
        publisher: new RecordingPublisher(),
        options: { tenants: {} },
      });
      const [acme, globex, none] = (await t.enqueue([
        msg('t1', { tenant: 'acme' }),
        msg('t2', { tenant: 'globex' }),
        msg('t3'),
      ])) as [string, string, string];
      t.publisher.fail(acme, 'permanent', rejected('refused')).fail(globex, 'permanent');
      await t.dispatcher.drain();
      type Page = { items: { messageId: string }[] };
      const listed = await outboxJson<Page>(
        ['dlq', 'list', '--table', t.table, '--tenant', 'acme'],
        url,
      );
      expect(listed.items.map((m) => m.messageId)).toEqual([acme]);
      expect(
        await outboxJson(['stats', '--table', t.table, '--tenant', 'globex'], url),
      ).toMatchObject({ dead: 1, delivered: 0 });
      expect(await statusOfIn(t.table, none)).toBe('delivered');
    });

    it('dlq show describes a binary dead letter by size and content type with a hex preview, never its raw bytes', async () => {
      const bin = await scope.open({ publisher: new RecordingPublisher() });
      // Markup and a terminal escape in the bytes: neither may reach the output as they are.
      const bytes = Buffer.concat([
        Buffer.from('<script>alert(1)</script>\u001b[2J', 'utf8'),
        Buffer.from([0x00, 0xff, 0xfe]),
        Buffer.alloc(300, 0x41),
      ]);
      const [id] = (await bin.enqueue({
        topic: 'media',
        key: 'm1',
        payload: bytes,
        contentType: 'application/avro',
        attributes: { rabbitmq: { priority: 3 } },
      })) as [string];
      bin.publisher.fail(id, 'permanent', rejected('broker refused the bytes'));
      await bin.dispatcher.drain();

      const text = await outbox(['dlq', 'show', id, '--table', bin.table], url);
      expect(text.code).toBe(0);
      expect(text.stdout).toContain(`payload (binary, ${bytes.length} bytes, application/avro)`);
      expect(text.stdout).toContain('00000000  3c 73 63 72 69 70 74 3e');
      expect(text.stdout).toContain('|<script>alert(1)|');
      expect(text.stdout).toContain(`… ${bytes.length - 256} more bytes not shown`);
      expect(text.stdout).toContain('attributes    {"rabbitmq":{"priority":3}}');
      expect(text.stdout).not.toContain('\u001b');
      expect(text.stdout).not.toContain('\u0000');

      const json = await outboxJson<Record<string, unknown>>(
        ['dlq', 'show', id, '--table', bin.table],
        url,
      );
      expect(json).toMatchObject({
        messageId: id,
        status: 'dead',
        encoding: 'binary',
        contentType: 'application/avro',
        attributes: { rabbitmq: { priority: 3 } },
        payload: {
          encoding: 'binary',
          contentType: 'application/avro',
          size: bytes.length,
          base64: bytes.toString('base64'),
        },
      });
      expect(json).not.toHaveProperty('payloadBytes');
    });

    it('fails with exit code 1 and one line, never a stack or a password', async () => {
      const secret = 'Pa55-w0rd-n0t-for-logs';
      const cases: [string, string][] = [];
      switch (db.name) {
        case 'postgres':
          cases.push(
            // Trust authentication ignores the password; the database does not exist.
            [
              `postgres://postgres:${secret}@${SERVICES.postgres.host}:${SERVICES.postgres.port}/no_such_db_xyz`,
              'Cannot connect to the postgres database',
            ],
            [`postgres://postgres:${secret}@127.0.0.1:1/test`, 'ECONNREFUSED'],
          );
          break;
        case 'mariadb':
          cases.push([
            `mariadb://root:${secret}@${SERVICES.mariadb.host}:${SERVICES.mariadb.port}/test`,
            'Access denied',
          ]);
          break;
        case 'sqlite':
          cases.push([`sqlite:${join(tmpdir(), 'no-such-outbox-dir', 'x.db')}`, 'does not exist']);
          break;
      }
      // As a process: its exit code and stderr are what a shell sees.
      const results = await Promise.all([
        ...cases.map(([badUrl]) => outboxProcess(['stats', '--table', table], badUrl)),
        outboxProcess(['dlq', 'list', '--table', 'no_such_outbox_table'], url),
      ]);
      results.forEach((result, i) => {
        expect(result.code).toBe(1);
        expect(result.stdout).toBe('');
        expect(result.stderr).toMatch(/^outbox: [^\n]+\n$/);
        expect(result.stderr).not.toMatch(NO_STACK);
        expect(result.stderr).not.toContain(secret);
        const expected = cases[i]?.[1];
        if (expected !== undefined) expect(result.stderr).toContain(expected);
      });
      expect(results[results.length - 1]?.stderr).toMatch(
        /The outbox table .*no_such_outbox_table.* cannot be read .*Create it with "outbox schema migrate"/,
      );
    });
  });
}

for (const db of TEST_DATABASES.filter((d) => d.name !== 'sqlite')) {
  describeWith(db.service === null ? [] : [db.service], `outbox partitions on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_clp' });
    const DAY = 86_400_000;
    const day = (ago: number): Date => new Date(Math.floor(Date.now() / DAY) * DAY - ago * DAY);
    const suffix = (at: Date): string => `p${at.toISOString().slice(0, 10).replace(/-/g, '')}`;
    const stamp = (at: Date): string => at.toISOString().slice(0, 19).replace('T', ' ');

    /** A partition for the day `ago` days back, holding one delivered row of three days ago. */
    async function pastPartition(table: string, ago: number): Promise<string> {
      const q = (name: string) => quoteTable(scope.ds, name);
      if (db.name === 'postgres') {
        await scope.ds.query(
          `CREATE TABLE ${q(`${table}_${suffix(day(ago))}`)} PARTITION OF ${q(table)} FOR VALUES FROM ('${day(ago).toISOString()}') TO ('${day(ago - 1).toISOString()}')`,
        );
      } else {
        // The first partition holds everything below its bound: split the past day off it.
        await scope.ds.query(
          `ALTER TABLE ${q(table)} REORGANIZE PARTITION ${suffix(day(0))} INTO (PARTITION ${suffix(day(ago))} VALUES LESS THAN ('${stamp(day(ago - 1))}'), PARTITION ${suffix(day(0))} VALUES LESS THAN ('${stamp(day(-1))}'))`,
        );
      }
      await scope.ds.query(
        `INSERT INTO ${q(table)} (message_id, topic, event_type, payload, headers, status, created_at, delivered_at)
VALUES (${db.name === 'postgres' ? '$1' : '?'}, 'orders', 't', '{}', '{}', 'delivered', '${stamp(new Date(day(ago).getTime() + 3_600_000))}', '${stamp(new Date(Date.now() - 3 * DAY))}')`,
        [storedId(db.name, randomUUID())],
      );
      return db.name === 'postgres' ? `${table}_${suffix(day(ago))}` : suffix(day(ago));
    }

    it('schema migrate --partition-by makes a partitioned table; partitions status and maintain report, create ahead and drop', async () => {
      const table = uniqueTable('outbox_clp');
      scope.defer(() => dropOutboxTable(scope.ds, table));
      const url = databaseUrlFor(db, scope.ds);
      const created = await outbox(
        ['schema', 'migrate', '--table', table, '--partition-by', 'day', '--premake', '2'],
        url,
      );
      expect(created.code).toBe(0);
      expect(created.stdout).toContain(`partitioned by day (2 partitions ahead`);
      const schema = await outbox(['schema', 'status', '--table', table, ...EVERY_STEP], url);
      expect(schema.stdout).toContain(
        'Layout: partitioned by day (see "outbox partitions status").',
      );
      const old = await pastPartition(table, 3);

      const status = await outboxJson<{
        interval: string;
        partitions: {
          name: string;
          droppable: boolean;
          keptBecause: string | null;
          rows: unknown;
        }[];
        missing: string[];
      }>(['partitions', 'status', '--table', table, '--retention', '1d', '--premake', '2'], url);
      expect(status.interval).toBe('day');
      expect(status.missing).toEqual([]);
      expect(status.partitions.find((p) => p.name === old)).toMatchObject({
        droppable: true,
        keptBecause: null,
        rows: { pending: 0, waiting: 0, delivered: 1, dead: 0 },
      });
      expect(status.partitions.filter((p) => p.droppable)).toHaveLength(1);
      const text = await outbox(
        ['partitions', 'status', '--table', table, '--retention', '1d'],
        url,
      );
      expect(text.stdout).toMatch(new RegExp(`${old} +\\S+ +\\S+ +0 +0 +1 +0 +.+ droppable`));
      expect(text.stdout).toMatch(/kept: within retention/);
      expect(text.stdout).toContain('1 partition droppable now.');

      const dry = await outboxJson(
        [
          'partitions',
          'maintain',
          '--dry-run',
          '--premake',
          '4',
          '--retention',
          '1d',
          '--table',
          table,
        ],
        url,
      );
      const ahead = [3, 4].map(
        (d) => (db.name === 'postgres' ? `${table}_` : '') + suffix(day(-d)),
      );
      expect(dry).toEqual({
        dryRun: true,
        skipped: null,
        created: ahead,
        dropped: [old],
        kept: [],
        notCreated: [],
        promoted: 0,
      });
      const done = await outbox(
        ['partitions', 'maintain', '--premake', '4', '--retention', '1d', '--table', table],
        url,
      );
      expect(done.code).toBe(0);
      expect(done.stdout).toContain(`Created ${ahead.join(', ')}.`);
      expect(done.stdout).toContain(`Dropped ${old}.`);
      const after = await outboxJson<{ partitions: { name: string }[]; missing: string[] }>(
        ['partitions', 'status', '--table', table, '--premake', '4'],
        url,
      );
      expect(after.partitions.map((p) => p.name)).not.toContain(old);
      expect(after.missing).toEqual([]);
    });

    it('partitions maintain drops dead letters by age only with --yes, and promotes the next message of their keys', async () => {
      const table = uniqueTable('outbox_clp');
      scope.defer(() => dropOutboxTable(scope.ds, table));
      const url = databaseUrlFor(db, scope.ds);
      await outbox(['schema', 'migrate', '--table', table, '--partition-by', 'day'], url);
      const old = await pastPartition(table, 3);
      const [head, follower] = [randomUUID(), randomUUID()];
      const p = (i: number) => (db.name === 'postgres' ? `$${i}` : '?');
      // Key k: a dead head in the old partition, its follower parked behind it in today's.
      await scope.ds.query(
        `INSERT INTO ${quoteTable(scope.ds, table)} (message_id, topic, message_key, event_type, payload, headers, status, created_at, dead_at)
VALUES (${p(1)}, 'orders', 'k', 't', '{}', '{}', 'dead', '${stamp(new Date(day(3).getTime() + 3_600_000))}', '${stamp(new Date(Date.now() - 3 * DAY))}')`,
        [storedId(db.name, head)],
      );
      await scope.ds.query(
        `INSERT INTO ${quoteTable(scope.ds, table)} (message_id, topic, message_key, event_type, payload, headers, status)
VALUES (${p(1)}, 'orders', 'k', 't', '{}', '{}', 'waiting')`,
        [storedId(db.name, follower)],
      );
      const statusOf = async (id: string) =>
        (await readOutbox(scope.ds, table)).find((r) => r.messageId === id)?.status;
      const maintain = ['partitions', 'maintain', '--retention', '1d', '--table', table];

      const refused = await outbox([...maintain, '--dead-retention', '0'], url);
      expect(refused).toMatchObject({ code: 2, stdout: '' });
      expect(refused.stderr).toMatch(/Refusing to delete dead letters by age without --yes/);
      expect(await statusOf(head)).toBe('dead');
      // A dry run deletes nothing: it needs no --yes.
      const dry = await outboxJson([...maintain, '--dead-retention', '0', '--dry-run'], url);
      expect(dry).toMatchObject({ dropped: [old], promoted: 0 });
      expect(await statusOf(head)).toBe('dead');

      const done = await outbox([...maintain, '--dead-retention', '0', '--yes'], url);
      expect(done.code).toBe(0);
      expect(done.stdout).toContain(`Dropped ${old}.`);
      expect(done.stdout).toContain('Promoted 1 waiting message whose dead head was dropped.');
      expect(await statusOf(head)).toBeUndefined();
      expect(await statusOf(follower)).toBe('pending');
    });

    it('partitions commands refuse a plain table and bad options, saying why', async () => {
      const url = databaseUrlFor(db, scope.ds);
      const printed = await outbox(
        ['schema', 'print', '--dialect', dialectOf[db.name], '--partition-by', 'week'],
        undefined,
      );
      expect(printed.code).toBe(0);
      expect(printed.stdout).toContain(
        db.name === 'postgres'
          ? 'PARTITION BY RANGE (created_at)'
          : 'PARTITION BY RANGE COLUMNS (created_at)',
      );
      expect(printed.stdout).toContain("'nestjs-outbox partitioned by week'");
      const plain = await scope.table('outbox_clq');
      const status = await outbox(['partitions', 'status', '--table', plain], url);
      expect(status.code).toBe(1);
      expect(status.stderr).toMatch(/^outbox: the table .* is not partitioned/);
      const maintain = await outbox(['partitions', 'maintain', '--table', plain], url);
      expect(maintain.code).toBe(1);
      expect(maintain.stdout).toMatch(/Nothing done: the table .* is not partitioned/);
      const refused = await outbox(
        ['schema', 'migrate', '--table', plain, '--partition-by', 'day'],
        url,
      );
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(
        'does not convert it to a table partitioned by day by itself',
      );
      for (const [args, problem] of [
        [['partitions'], '"outbox partitions" needs a subcommand: status, maintain.'],
        [
          ['schema', 'migrate', '--partition-by', 'hour'],
          '--partition-by must be day, week or month.',
        ],
        [
          ['partitions', 'maintain', '--premake', '0'],
          '--premake must be a whole number from 1 to 1000.',
        ],
        [
          ['partitions', 'status', '--dry-run'],
          '--dry-run does not apply to "outbox partitions status".',
        ],
      ] as const) {
        const result = await outbox(args, url);
        expect(result.code).toBe(2);
        expect(result.stderr).toContain(problem);
      }
    });
  });
}
