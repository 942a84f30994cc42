import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Client } from 'pg';
import ts from 'typescript';
import { serverConnection } from '../support/databases';
import { describeWith, SERVICES } from '../support/services';

// The fault kit's set-up of docs/testing.md ("A complete set-up: PostgreSQL and RabbitMQ"), run
// as a user runs it, so that the page cannot drift from what works: its three files are copied
// out of the page unedited into an app folder, the module and the entry module compiled there as
// an app's build compiles them (src/ to dist/), and the page's spec is loaded into this one, so
// that its cases run here, each starting dist/outbox-dispatcher.main.js as the page says. The
// package is the repository's sources: node_modules/nestjs-outbox in that folder loads them
// (transpiled by test/support/children/register-ts.js in the dispatcher's process), as the jest
// mapper does in this one.

const ROOT = resolve(__dirname, '../..');
const APP = join(ROOT, '.tmp', `fault-kit-docs-${process.pid}`);
const VARIANT = 'the fault kit';
const SPEC = 'outbox-faults.e2e-spec.ts';

/** The page's files of the variant, by name, as written. */
function pageFiles(): Map<string, string> {
  const page = readFileSync(join(ROOT, 'docs/testing.md'), 'utf8');
  const files = new Map<string, string>();
  for (const [, file, variant, code] of page.matchAll(
    /^```ts\n\/\/ ([\w.-]+\.ts), (.+)\n([\s\S]*?)^```/gm,
  ))
    if (variant === VARIANT) files.set(file ?? '', code ?? '');
  const names = [...files.keys()].sort();
  const expected = ['outbox-dispatcher.main.ts', 'outbox-faults.module.ts', SPEC].sort();
  if (names.join(' ') !== expected.join(' '))
    throw new Error(`docs/testing.md: the fault kit's files are ${names.join(', ')}`);
  return files;
}

/** A package `nestjs-outbox` in the app's node_modules that loads the sources of each entry point. */
function linkPackage(): void {
  const dir = join(APP, 'node_modules', 'nestjs-outbox');
  mkdirSync(dir, { recursive: true });
  const { entryPoints } = JSON.parse(readFileSync(join(ROOT, 'entry-points.json'), 'utf8')) as {
    entryPoints: Record<string, { source: string }>;
  };
  const exports: Record<string, string> = {};
  Object.entries(entryPoints).forEach(([name, { source }], i) => {
    exports[name === 'nestjs-outbox' ? '.' : `./${name.slice('nestjs-outbox/'.length)}`] =
      `./entry-${i}.js`;
    writeFileSync(
      join(dir, `entry-${i}.js`),
      `require('./register.js');\nmodule.exports = require(${JSON.stringify(join(ROOT, source))});\n`,
    );
  });
  writeFileSync(
    join(dir, 'register.js'),
    `require(${JSON.stringify(join(ROOT, 'test/support/children/register-ts.js'))});\n`,
  );
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'nestjs-outbox', exports }));
}

/** Writes the app: src/ from the page, dist/ compiled from it as `nest build` would. */
function writeApp(): void {
  const files = pageFiles();
  rmSync(APP, { recursive: true, force: true });
  mkdirSync(join(APP, 'src'), { recursive: true });
  mkdirSync(join(APP, 'dist'), { recursive: true });
  for (const [file, code] of files) {
    writeFileSync(join(APP, 'src', file), code);
    if (file === SPEC) continue;
    const { outputText } = ts.transpileModule(code, {
      fileName: file,
      compilerOptions: {
        module: ts.ModuleKind.CommonJS,
        target: ts.ScriptTarget.ES2022,
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
        esModuleInterop: true,
      },
    });
    writeFileSync(join(APP, 'dist', file.replace(/\.ts$/, '.js')), outputText);
  }
  writeFileSync(
    join(APP, 'package.json'),
    JSON.stringify({ name: 'fault-kit-docs', private: true }),
  );
  linkPackage();
}

function databaseUrl(): string {
  const c = serverConnection('postgres');
  const password = c.password === undefined ? '' : `:${encodeURIComponent(c.password)}`;
  return `postgres://${encodeURIComponent(c.username)}${password}@${c.host}:${c.port}/${c.database}`;
}

const rabbitMqUrl = `amqp://${process.env.RABBITMQ_USER ?? 'guest'}:${process.env.RABBITMQ_PASSWORD ?? 'guest'}@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;

describeWith(['postgres', 'rabbitmq'], "docs/testing.md's fault kit, as written", () => {
  const cwd = process.cwd();
  writeApp();
  // The page's spec reads the servers' URLs when it loads, and starts the entry module from the
  // project's root: this app's folder, while its cases run.
  const saved = { db: process.env.TEST_DATABASE_URL, mq: process.env.TEST_RABBITMQ_URL };
  process.env.TEST_DATABASE_URL = databaseUrl();
  process.env.TEST_RABBITMQ_URL = rabbitMqUrl;
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- registers its cases here
    require(join(APP, 'src', SPEC));
  } finally {
    restore('TEST_DATABASE_URL', saved.db);
    restore('TEST_RABBITMQ_URL', saved.mq);
  }
  beforeAll(() => process.chdir(APP));
  afterAll(() => {
    process.chdir(cwd);
    rmSync(APP, { recursive: true, force: true });
  });

  // The page's tear-down (dropOutboxTables) left nothing of the tables its cases made, which it
  // names `outbox_faults_<pid>_<time>`.
  afterAll(async () => {
    const client = new Client({ connectionString: databaseUrl() });
    await client.connect();
    try {
      const { rows } = await client.query<{ relname: string }>(
        'SELECT relname FROM pg_class WHERE starts_with(relname, $1) ORDER BY relname',
        [`outbox_faults_${process.pid}_`],
      );
      expect(rows.map((row) => row.relname)).toEqual([]);
    } finally {
      await client.end();
    }
  });
});

function restore(name: string, value: string | undefined): void {
  if (value === undefined) delete process.env[name];
  else process.env[name] = value;
}
