import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { INestApplication, LoggerService } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { messageIdText } from '../../lib/store/rows/message-id-codec';
import { bootstrap } from '../../sample/bootstrap';
import { SampleConfig, SampleConfigError } from '../../sample/config/sample.config';
import { Order } from '../../sample/orders/order.entity';
import { SERVICES, describeWith, type ServiceName } from '../support/services';
import { sleep } from '../support/wait-for';

// ---------------------------------------------------------------------------------------------
// Helpers

/** Keeps every line the app logs, so tests can assert what a user would see. */
class CapturingLogger implements LoggerService {
  readonly lines: string[] = [];
  log(message: unknown, ...rest: unknown[]): void {
    this.push('LOG', message, rest);
  }
  error(message: unknown, ...rest: unknown[]): void {
    this.push('ERROR', message, rest);
  }
  warn(message: unknown, ...rest: unknown[]): void {
    this.push('WARN', message, rest);
  }
  debug(): void {}
  verbose(): void {}
  private push(level: string, message: unknown, rest: unknown[]): void {
    const context = rest.length > 0 ? rest[rest.length - 1] : '';
    this.lines.push(`${level} [${String(context)}] ${String(message)}`);
  }
}

function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => done(port));
    });
  });
}

async function eventually<T>(
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  what: string,
  logs: () => string,
  timeoutMs = 15_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline)
      throw new Error(
        `Timed out after ${timeoutMs} ms waiting for ${what}. Recent output:\n${logs().split('\n').slice(-25).join('\n')}`,
      );
    await sleep(50);
  }
}

const receivedLine = (orderId: string, messageId: string) =>
  `received order.created for order ${orderId} (message ${messageId})`;

interface OutboxRow {
  messageId: string;
  topic: string;
  type: string;
  status: string;
  payload: unknown;
}

function outboxTable(ds: DataSource): string {
  const type = ds.options.type;
  if (type === 'mysql' || type === 'mariadb') return '`outbox`';
  const schema = type === 'postgres' ? (ds.options as { schema?: string }).schema : undefined;
  return schema === undefined ? '"outbox"' : `"${schema}"."outbox"`;
}

async function outboxRowsFor(ds: DataSource, orderId: string): Promise<OutboxRow[]> {
  const param = ds.options.type === 'postgres' ? '$1' : '?';
  const rows = await ds.query<Record<string, unknown>[]>(
    `SELECT message_id, topic, event_type, status, payload FROM ${outboxTable(ds)} WHERE message_key = ${param}`,
    [orderId],
  );
  return rows.map((r) => ({
    // Bytes on MySQL/MariaDB (BINARY(16)), text elsewhere.
    messageId: messageIdText(r.message_id),
    topic: String(r.topic),
    type: String(r.event_type),
    status: String(r.status),
    payload: typeof r.payload === 'string' ? (JSON.parse(r.payload) as unknown) : r.payload,
  }));
}

async function countRows(ds: DataSource): Promise<{ orders: number; outbox: number }> {
  const [row] = await ds.query<[{ n: string | number }]>(
    `SELECT COUNT(*) AS n FROM ${outboxTable(ds)}`,
  );
  return { orders: await ds.getRepository(Order).count(), outbox: Number(row.n) };
}

const postOrder = (baseUrl: string, body: unknown, raw?: string) =>
  fetch(`${baseUrl}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: raw ?? JSON.stringify(body),
  });

interface RunningSample {
  app: INestApplication;
  baseUrl: string;
  dataSource: DataSource;
  logs: CapturingLogger;
}

/** Starts the sample in this process, as `npm run start:sample` would with these variables. */
async function startSample(env: Record<string, string>): Promise<RunningSample> {
  const logs = new CapturingLogger();
  const config = SampleConfig.fromEnv({
    PORT: '0',
    OUTBOX_TCP_PORT: String(await freePort()),
    ...env,
  });
  const app = await bootstrap(config, { logger: logs });
  const { port } = new URL(await app.getUrl());
  return { app, baseUrl: `http://127.0.0.1:${port}`, dataSource: app.get(DataSource), logs };
}

/**
 * The sample's promise, end to end: the order and its event commit together, the consumer gets
 * the event with the outbox row's message id, and the row ends delivered.
 */
async function placeOrderAndFollowIt(sample: RunningSample, customerId = 'c-1'): Promise<void> {
  const { baseUrl, dataSource: ds, logs } = sample;
  const response = await postOrder(baseUrl, { customerId, total: 42.5 });
  expect(response.status).toBe(201);
  const order = (await response.json()) as { id: string; customerId: string; total: number };
  expect(order).toMatchObject({
    id: expect.stringMatching(/^[0-9a-f-]{36}$/),
    customerId,
    total: 42.5,
  });

  const stored = await ds.getRepository(Order).findOneBy({ id: order.id });
  expect(stored).toMatchObject({ id: order.id, customerId, total: 42.5 });
  const rows = await outboxRowsFor(ds, order.id);
  expect(rows).toHaveLength(1);
  const [row] = rows as [OutboxRow];
  expect(row).toMatchObject({
    topic: 'orders.created',
    type: 'order.created',
    payload: { orderId: order.id, customerId, total: 42.5 },
  });

  const fetched = await fetch(`${baseUrl}/orders/${order.id}`);
  expect(fetched.status).toBe(200);
  expect(await fetched.json()).toMatchObject({ id: order.id, customerId, total: 42.5 });

  const dump = () => logs.lines.join('\n');
  await eventually(
    () => logs.lines.some((l) => l.includes(receivedLine(order.id, row.messageId))),
    'the consumer to log the event',
    dump,
  );
  await eventually(
    async () => (await outboxRowsFor(ds, order.id))[0]?.status === 'delivered',
    'the outbox row to be delivered',
    dump,
  );
  expect(logs.lines.filter((l) => l.includes(`for order ${order.id}`))).toHaveLength(1);

  const stats = (await (await fetch(`${baseUrl}/outbox/stats`)).json()) as Record<string, unknown>;
  expect(stats).toMatchObject({ pending: 0, leased: 0, dead: 0, delivered: expect.any(Number) });
  expect(stats.delivered as number).toBeGreaterThanOrEqual(1);
  expect(logs.lines.filter((l) => l.startsWith('ERROR'))).toEqual([]);
}

const SAMPLE_VARS =
  /^(PORT|DATABASE_URL|DATABASE_SCHEMA|OUTBOX_[A-Z_]+|RABBITMQ_URL|NATS_URL|REDIS_URL|MQTT_URL)$/;

// ---------------------------------------------------------------------------------------------

describe('sample configuration', () => {
  it('runs embedded with no variables: SQLite under ./.tmp, TCP on 3001, HTTP on 3000', () => {
    const config = SampleConfig.fromEnv({});
    expect(config.port).toBe(3000);
    expect(config.database).toEqual({ type: 'sqlite', path: resolve('.tmp/sample.sqlite') });
    expect(config.transport).toEqual({ type: 'tcp', host: '127.0.0.1', port: 3001 });
  });

  it('never puts credentials in what it logs or throws', () => {
    const pg = SampleConfig.fromEnv({
      DATABASE_URL: 'postgres://app:s3cr3t@db:5432/orders',
      OUTBOX_TRANSPORT: 'rmq',
    });
    expect(pg.describeDatabase()).toBe('postgres postgres://***@db:5432/orders');
    expect(pg.describeTransport()).toBe('rmq amqp://***@127.0.0.1:5672 queue orders');
    expect(() => SampleConfig.fromEnv({ DATABASE_URL: 'oracle://app:s3cr3t@db/orders' })).toThrow(
      SampleConfigError,
    );
    expect(() =>
      SampleConfig.fromEnv({ DATABASE_URL: 'oracle://app:s3cr3t@db/orders' }),
    ).not.toThrow(/s3cr3t/);
    expect(() => SampleConfig.fromEnv({ OUTBOX_TRANSPORT: 'kafka' })).toThrow(
      'OUTBOX_TRANSPORT=kafka is not supported: use one of tcp, rmq, nats, redis, mqtt',
    );
    expect(SampleConfig.fromEnv({ DATABASE_URL: 'mariadb://root@db/shop' }).database).toEqual({
      type: 'mariadb',
      url: 'mysql://root@db/shop',
    });
    expect(SampleConfig.fromEnv({ DATABASE_URL: 'sqlite:///var/data/x.sqlite' }).database).toEqual({
      type: 'sqlite',
      path: '/var/data/x.sqlite',
    });
  });
});

describe('sample on SQLite + TCP (embedded default), in process', () => {
  let dir: string;
  let sample: RunningSample;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'outbox-sample-'));
    sample = await startSample({ DATABASE_URL: `sqlite:${join(dir, 'sample.sqlite')}` });
  });

  afterAll(async () => {
    await sample?.app.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('logs where it listens and what it uses', () => {
    expect(sample.logs.lines.find((l) => l.includes('Orders sample listening on'))).toMatch(
      new RegExp(
        `listening on http://localhost:\\d+ \\(database: sqlite ${join(dir, 'sample.sqlite')}; outbox transport: tcp 127\\.0\\.0\\.1:\\d+\\)`,
      ),
    );
  });

  it('saves the order with its event, delivers the event to the consumer and marks it delivered', async () => {
    await placeOrderAndFollowIt(sample);
  });

  it('answers 404 for an unknown order', async () => {
    const response = await fetch(`${sample.baseUrl}/orders/00000000-0000-0000-0000-000000000000`);
    expect(response.status).toBe(404);
  });

  const badBodies: [string, unknown, string | undefined, string][] = [
    ['no customerId', { total: 10 }, undefined, 'customerId must be a non-empty string'],
    [
      'an empty customerId',
      { customerId: ' ', total: 10 },
      undefined,
      'customerId must be a non-empty string',
    ],
    [
      'a string total',
      { customerId: 'c-1', total: '42.5' },
      undefined,
      'total must be a number above 0',
    ],
    [
      'a negative total',
      { customerId: 'c-1', total: -1 },
      undefined,
      'total must be a number above 0',
    ],
    [
      'three decimals',
      { customerId: 'c-1', total: 1.005 },
      undefined,
      'total must have at most two decimals',
    ],
    [
      'an unknown property',
      { customerId: 'c-1', total: 1, status: 'paid' },
      undefined,
      'property status should not exist',
    ],
    ['an array', [{ customerId: 'c-1', total: 1 }], undefined, 'body must be a JSON object'],
    ['malformed JSON', undefined, '{"customerId": "c-1", "total": ', ''],
  ];
  it.each(badBodies)(
    'answers 400 to %s and writes neither an order nor a message',
    async (_name, body, raw, message) => {
      const before = await countRows(sample.dataSource);
      const response = await postOrder(sample.baseUrl, body, raw);
      expect(response.status).toBe(400);
      const answer = (await response.json()) as { message: string | string[] };
      expect(([] as string[]).concat(answer.message).join('\n')).toContain(message);
      expect(await countRows(sample.dataSource)).toEqual(before);
    },
  );

  it('keeps no order when its outbox write fails: one transaction', async () => {
    const ds = sample.dataSource;
    const before = await countRows(ds);
    await ds.query(
      `CREATE TRIGGER e2e_refuse_outbox BEFORE INSERT ON outbox BEGIN SELECT RAISE(ABORT, 'refused by the e2e test'); END`,
    );
    try {
      const response = await postOrder(sample.baseUrl, { customerId: 'c-rollback', total: 5 });
      expect(response.status).toBe(500);
    } finally {
      await ds.query('DROP TRIGGER e2e_refuse_outbox');
    }
    expect(await countRows(ds)).toEqual(before);
    expect(await ds.getRepository(Order).countBy({ customerId: 'c-rollback' })).toBe(0);
  });
});

/**
 * The README's quick-start block, one command a line (comments and blank lines dropped): what a
 * reader pastes, so the specs below run those very lines.
 */
function quickStartCommands(): string[] {
  const readme = readFileSync(resolve(__dirname, '../../README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Quick start'));
  const block = /```bash\n([\s\S]*?)```/.exec(section)?.[1] ?? '';
  return block
    .split('\n')
    .map((line) => line.replace(/\s+#.*$/, '').trim())
    .filter((line) => line !== '');
}

/** The quick start's command that starts the sample under `what` (e.g. `start:sample`). */
function quickStartCommand(what: string): string {
  const command = quickStartCommands().find((line) => line.includes(what));
  if (command === undefined) throw new Error(`README's quick start has no command with ${what}`);
  return command;
}

/**
 * Runs `command` through `sh -c` with no terminal (stdin closed, output piped), as a script or
 * CI runs a pasted line, and checks that the sample it starts delivers an order event and
 * shuts down on SIGTERM. `timeoutMs` bounds the wait for its startup line (a first `npx` fetches
 * the Nest CLI from the registry before it builds).
 */
function describeSampleStartedBy(title: string, command: () => string, timeoutMs: number): void {
  describe(title, () => {
    let dir: string;
    let child: ChildProcess | undefined;
    /** Every process of the group holding the pipes (sh, npm, node) is gone. */
    let closed = false;
    let output = '';
    let reader: DataSource | undefined;

    beforeAll(() => {
      dir = mkdtempSync(join(tmpdir(), 'outbox-sample-cli-'));
    });

    afterAll(async () => {
      // Only when a failed test left the group running.
      if (child?.pid !== undefined && !closed) {
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          // Already gone.
        }
      }
      await reader?.destroy();
      rmSync(dir, { recursive: true, force: true });
    });

    it(
      'starts without a terminal, delivers an order event, and shuts down on SIGTERM',
      async () => {
        const [port, tcpPort] = [await freePort(), await freePort()];
        const database = join(dir, 'orders.sqlite');
        const env: NodeJS.ProcessEnv = Object.fromEntries(
          Object.entries(process.env).filter(([k]) => !SAMPLE_VARS.test(k)),
        );
        Object.assign(env, {
          PORT: String(port),
          OUTBOX_TCP_PORT: String(tcpPort),
          DATABASE_URL: `sqlite:${database}`,
          NO_COLOR: '1',
        });
        // Its own process group, so that SIGTERM reaches node through sh and npm.
        const proc = spawn('sh', ['-c', command()], {
          cwd: resolve(__dirname, '../..'),
          env,
          detached: true,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        child = proc;
        proc.once('close', () => (closed = true));
        proc.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
        proc.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
        const dump = () => output;

        await eventually(
          () => output.includes('Orders sample listening on') || closed,
          'the startup line',
          dump,
          timeoutMs,
        );
        expect(output).toContain(
          `Orders sample listening on http://localhost:${port} (database: sqlite ${database}; outbox transport: tcp 127.0.0.1:${tcpPort})`,
        );

        const response = await postOrder(`http://127.0.0.1:${port}`, {
          customerId: 'c-cli',
          total: 19.99,
        });
        expect(response.status).toBe(201);
        const { id } = (await response.json()) as { id: string };

        reader = await new DataSource({
          type: 'better-sqlite3',
          database,
          entities: [Order],
        }).initialize();
        const [row] = await outboxRowsFor(reader, id);
        expect(row).toBeDefined();
        await eventually(
          () => output.includes(receivedLine(id, row?.messageId ?? '?')),
          'the consumer to log the event',
          dump,
        );
        await eventually(
          async () => (await outboxRowsFor(reader as DataSource, id))[0]?.status === 'delivered',
          'the outbox row to be delivered',
          dump,
        );

        process.kill(-(proc.pid as number), 'SIGTERM');
        await eventually(() => closed, 'the process to exit', dump);
        expect(output).toContain('SIGTERM received: shutting down');
        expect(output).not.toMatch(/\bERROR\b/);
      },
      timeoutMs + 60_000,
    );
  });
}

describe("README's quick start", () => {
  it("first line installs and starts the sample with npm's script", () => {
    expect(quickStartCommands()[0]).toBe('npm ci && npm run start:sample');
  });
});

// The first line's `npm ci` is what the run itself did: its start runs alone.
describeSampleStartedBy(
  'sample started with `npm run start:sample` (SQLite + TCP)',
  () => 'npm run --silent start:sample',
  40_000,
);

// Run as pasted: an `npx` that asks before installing stops here ("npx canceled due to missing
// packages and no YES option"), as it does in any script or CI job.
describeSampleStartedBy(
  "sample started by the README's Nest CLI line, as pasted (SQLite + TCP)",
  () => quickStartCommand('@nestjs/cli'),
  180_000,
);

// ---------------------------------------------------------------------------------------------
// Real servers

function postgresUrl(): string {
  const { host, port } = SERVICES.postgres;
  const user = encodeURIComponent(process.env.PGUSER ?? 'postgres');
  // A password the startup line must not show (ignored by a trust-auth server).
  const password = encodeURIComponent(process.env.PGPASSWORD ?? 'e2e-not-logged');
  return `postgres://${user}:${password}@${host}:${port}/${process.env.PGDATABASE ?? 'test'}`;
}

let schemaCounter = 0;

/** The sample against PostgreSQL in a schema of its own, dropped afterwards. */
function describeOnPostgres(
  name: string,
  services: readonly ServiceName[],
  env: () => Record<string, string>,
  extra?: () => Promise<void>,
): void {
  describeWith(['postgres', ...services], name, () => {
    const schema = `sample_e2e_${process.pid}_${++schemaCounter}`;
    let admin: DataSource;
    let sample: RunningSample | undefined;

    beforeAll(async () => {
      admin = await new DataSource({ type: 'postgres', url: postgresUrl() }).initialize();
      await admin.query(`CREATE SCHEMA "${schema}"`);
      sample = await startSample({
        DATABASE_URL: postgresUrl(),
        DATABASE_SCHEMA: schema,
        ...env(),
      });
    });

    afterAll(async () => {
      await sample?.app.close();
      await admin?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin?.destroy();
      await extra?.();
    });

    it('logs its database and transport without the password', () => {
      const line = sample?.logs.lines.find((l) => l.includes('Orders sample listening on')) ?? '';
      expect(line).toContain(
        `database: postgres postgres://***@${SERVICES.postgres.host}:${SERVICES.postgres.port}/`,
      );
      expect(line).not.toContain(decodeURIComponent(new URL(postgresUrl()).password));
    });

    it('saves the order with its event, delivers the event to the consumer and marks it delivered', async () => {
      await placeOrderAndFollowIt(sample as RunningSample, 'c-pg');
    });

    it('answers 400 to a bad body and writes nothing', async () => {
      const s = sample as RunningSample;
      const before = await countRows(s.dataSource);
      expect((await postOrder(s.baseUrl, { customerId: 'c-pg', total: 0 })).status).toBe(400);
      expect(await countRows(s.dataSource)).toEqual(before);
    });
  });
}

describeOnPostgres('sample on PostgreSQL + TCP', [], () => ({}));

// The sample publishes with RabbitMqPublisher (amqplib) and consumes with Nest's RMQ server, which
// loads amqp-connection-manager on top of amqplib.
let rmqTransportInstalled = true;
try {
  require.resolve('amqp-connection-manager');
} catch {
  rmqTransportInstalled = false;
}
const rmqQueue = `orders_e2e_${process.pid}_${Date.now()}`;
const rabbitUrl = () =>
  process.env.RABBITMQ_URL ??
  `amqp://guest:guest@${SERVICES.rabbitmq.host}:${SERVICES.rabbitmq.port}`;
if (rmqTransportInstalled) {
  describeOnPostgres(
    'sample on PostgreSQL + RabbitMQ (RabbitMqPublisher, Nest RMQ consumer)',
    ['rabbitmq'],
    () => ({ OUTBOX_TRANSPORT: 'rmq', RABBITMQ_URL: rabbitUrl(), OUTBOX_QUEUE: rmqQueue }),
    async () => {
      const amqp = await import('amqplib');
      const connection = await amqp.connect(rabbitUrl());
      const channel = await connection.createChannel();
      await channel.deleteQueue(rmqQueue);
      await connection.close();
    },
  );
} else {
  describe.skip('sample on PostgreSQL + RabbitMQ [skipped: the Nest RMQ transport needs the amqp-connection-manager package, which is not installed]', () => {
    it('delivers through RabbitMQ', () => undefined);
  });
}

describeOnPostgres('sample on PostgreSQL + NATS', ['nats'], () => ({
  OUTBOX_TRANSPORT: 'nats',
  NATS_URL: `nats://${SERVICES.nats.host}:${SERVICES.nats.port}`,
}));
describeOnPostgres('sample on PostgreSQL + Redis', ['redis'], () => ({
  OUTBOX_TRANSPORT: 'redis',
  REDIS_URL: `redis://${SERVICES.redis.host}:${SERVICES.redis.port}`,
}));
describeOnPostgres('sample on PostgreSQL + MQTT', ['mqtt'], () => ({
  OUTBOX_TRANSPORT: 'mqtt',
  MQTT_URL: `mqtt://${SERVICES.mqtt.host}:${SERVICES.mqtt.port}`,
}));

describeWith(['mariadb'], 'sample on MariaDB + TCP', () => {
  const database = `sample_e2e_${process.pid}`;
  const { host, port } = SERVICES.mariadb;
  const auth = `${encodeURIComponent(process.env.MYSQL_USER ?? 'root')}${process.env.MYSQL_PASSWORD ? `:${encodeURIComponent(process.env.MYSQL_PASSWORD)}` : ''}`;
  let admin: DataSource;
  let sample: RunningSample | undefined;

  beforeAll(async () => {
    admin = await new DataSource({
      type: 'mariadb',
      url: `mysql://${auth}@${host}:${port}/${process.env.MYSQL_DATABASE ?? 'test'}`,
    }).initialize();
    await admin.query(`CREATE DATABASE \`${database}\``);
    sample = await startSample({ DATABASE_URL: `mariadb://${auth}@${host}:${port}/${database}` });
  });

  afterAll(async () => {
    await sample?.app.close();
    await admin?.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await admin?.destroy();
  });

  it('saves the order with its event, delivers the event to the consumer and marks it delivered', async () => {
    await placeOrderAndFollowIt(sample as RunningSample, 'c-maria');
  });
});
