import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { createPool, type Pool, type PoolConnection } from 'mysql2/promise';
import type {
  LoggedBatch,
  OutboxLogSourceContext,
} from '../../lib/store/ports/outbox-log-source.port';
import { OutboxOptionsError } from '../../lib/errors/outbox-options.error';
import { mysql2SqlPort } from '../../lib/drivers/mysql2/mysql2.sql-port';
import {
  outboxTableDdl,
  outboxTableDropDdl,
  tableNamesFor,
} from '../../lib/store/schema/outbox-table-ddl';
import type {
  BinlogClient,
  BinlogClientClass,
  BinlogClientStartOptions,
} from '../../lib/log-tailing/mysql/mysql-binlog-client';
import {
  mysqlLogSource,
  type MysqlBinlogSource,
} from '../../lib/log-tailing/mysql/mysql-binlog.source';
import {
  mysqlLogLockName,
  mysqlLogTailingDdl,
  mysqlLogTailingDrop,
  mysqlReadLogPosition,
} from '../../lib/log-tailing/mysql/mysql-log-tailing.sql';
import {
  compareBinlogPositions,
  parseBinlogPosition,
  retainedBinlogBytes,
} from '../../lib/log-tailing/mysql/mysql-binlog-position';
import { serverConnection, uniqueTable } from '../support/databases';
import { describeWithPackages } from '../support/services';
import { FaultProxy } from '../../lib/testing';
import { expectNever, resolvesWithin, waitFor } from '../support/wait-for';

// zongji is an ES module. Node's own require loads it (20.19+); jest's module system, which also
// stands in for `node:module`, cannot, so the test asks the process for the real one.
const nodeModule = process.getBuiltinModule('node:module');
const ZongJi = (
  nodeModule.createRequire(__filename)('@vlasky/zongji') as { default: BinlogClientClass }
).default;

const server = serverConnection('mariadb');
const binlogLogin = {
  host: server.host,
  port: server.port,
  user: server.username,
  password: server.password,
};

interface Run {
  readonly batches: LoggedBatch[];
  readonly done: Promise<void>;
  stop(): Promise<void>;
}

const execFileAsync = promisify(execFile);
/** Transpiles TypeScript for the child once per change (test/support/children/register-ts.js). */
const REGISTER_TS = resolve(__dirname, '../support/children/register-ts.js');

describe('loading @vlasky/zongji', () => {
  // Where jest cannot follow (see above): in a plain Node process, as an app runs the CommonJS build.
  it('finds the class under the ES module namespace, from CommonJS', async () => {
    const script =
      "require('./lib/log-tailing/mysql/mysql-binlog-client').loadBinlogClient()" +
      ".then((c) => console.log(JSON.stringify({ same: c === require('@vlasky/zongji').default })))";
    const { stdout } = await execFileAsync(process.execPath, ['-r', REGISTER_TS, '-e', script], {
      cwd: resolve(__dirname, '../..'),
    });
    expect(JSON.parse(stdout)).toEqual({ same: true });
  });
});

describeWithPackages(['mariadb'], ['@vlasky/zongji'], 'MySQL/MariaDB binlog log source', () => {
  let pool: Pool;
  let table: string;
  let context: OutboxLogSourceContext;
  const runs: Run[] = [];
  const proxies: FaultProxy[] = [];

  const source = (owner: string): MysqlBinlogSource =>
    mysqlLogSource(
      { ...context, owner },
      { connection: binlogLogin, client: ZongJi, retryMs: 200, idleAdvanceMs: 200 },
    );

  const start = (s: MysqlBinlogSource, onBatch?: (b: LoggedBatch) => Promise<void>): Run => {
    const controller = new AbortController();
    const batches: LoggedBatch[] = [];
    const done = s.run(async (batch) => {
      batches.push(batch);
      await onBatch?.(batch);
    }, controller.signal);
    const run = {
      batches,
      done,
      async stop() {
        controller.abort();
        await done;
      },
    };
    runs.push(run);
    return run;
  };

  /** Inserts one row per key in one transaction; answers the ids, committed or not. */
  const enqueue = async (
    keys: readonly (string | null)[],
    outcome: 'commit' | 'rollback' = 'commit',
    on?: PoolConnection,
  ): Promise<string[]> => {
    const connection = on ?? (await pool.getConnection());
    try {
      if (on === undefined) await connection.query('BEGIN');
      const ids: string[] = [];
      for (const key of keys) {
        const [result] = await connection.query(
          `INSERT INTO ${table} (message_id, topic, message_key, event_type, payload, headers)
           VALUES (UNHEX(REPLACE(UUID(), '-', '')), 'orders', ?, 'created', '{}', '{}')`,
          [key],
        );
        ids.push(String((result as { insertId: number }).insertId));
      }
      if (on === undefined) await connection.query(outcome === 'commit' ? 'COMMIT' : 'ROLLBACK');
      return ids;
    } finally {
      if (on === undefined) connection.release();
    }
  };

  const storedPosition = async (): Promise<string | null> => {
    const { rows } = await context.sql.query<{ binlog_file: string; binlog_offset: unknown }>(
      mysqlReadLogPosition(context.names),
    );
    const row = rows[0];
    return row === undefined ? null : `${row.binlog_file}:${String(row.binlog_offset)}`;
  };

  const idsOf = (batches: readonly LoggedBatch[]): string[] =>
    batches.flatMap((b) => b.inserts.map((i) => i.id));

  beforeAll(() => {
    pool = createPool({
      host: server.host,
      port: server.port,
      user: server.username,
      password: server.password,
      database: server.database,
      connectionLimit: 8,
    });
  });

  beforeEach(async () => {
    table = uniqueTable('lt_my');
    const names = tableNamesFor('mysql', { tableName: table });
    context = { database: 'mysql', names, sql: mysql2SqlPort(pool), owner: 'a' };
    for (const statement of [
      ...outboxTableDdl('mysql', { tableName: table }),
      ...mysqlLogTailingDdl(names),
    ]) {
      await pool.query(statement);
    }
  });

  afterEach(async () => {
    await Promise.all(runs.splice(0).map((run) => run.stop()));
    await Promise.all(proxies.splice(0).map((proxy) => proxy.close()));
    for (const statement of [
      ...mysqlLogTailingDrop(context.names),
      ...outboxTableDropDdl('mysql', { tableName: table }),
    ]) {
      await pool.query(statement);
    }
  });

  afterAll(async () => {
    await pool.end();
  });

  it('passes its check on this server', async () => {
    await expect(source('a').check()).resolves.toBeUndefined();
  });

  it('fails its check with the login, never the password, when the binlog user cannot log in', async () => {
    const s = mysqlLogSource(context, {
      connection: { ...binlogLogin, user: 'lt_my_nobody', password: 'lt-my-wrong-secret' },
      client: ZongJi,
    });
    const error = await s.check().then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect((error as OutboxOptionsError).option).toBe('logTailing.connection');
    expect((error as Error).message).toContain(`lt_my_nobody@${server.host}:${server.port}`);
    expect((error as Error).message).toContain('Access denied');
    expect((error as Error).message).not.toContain('lt-my-wrong-secret');
  });

  it('names the missing grants of a binlog user, and reads with no more than the grants it names', async () => {
    const user = `lt_my_user_${process.pid}`;
    const login = { ...binlogLogin, user, password: 'lt-my-secret' };
    const limited = (): MysqlBinlogSource =>
      mysqlLogSource(context, { connection: login, client: ZongJi, retryMs: 200 });
    try {
      await pool.query(`CREATE USER '${user}'@'%' IDENTIFIED BY 'lt-my-secret'`);
      const error = await limited()
        .check()
        .then(
          () => null,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(OutboxOptionsError);
      expect((error as OutboxOptionsError).option).toBe('REPLICATION SLAVE');
      const message = (error as Error).message;
      expect(message).toContain(`GRANT REPLICATION SLAVE ON *.* TO '${user}'@'%';`);
      expect(message).toContain(`GRANT BINLOG MONITOR ON *.* TO '${user}'@'%';`);
      expect(message).toContain(`GRANT SELECT ON ${server.database}.${table} TO '${user}'@'%';`);
      expect(message).not.toContain('lt-my-secret');

      await pool.query(`GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '${user}'@'%'`);
      await pool.query(`GRANT SELECT ON ${server.database}.${table} TO '${user}'@'%'`);
      const s = limited();
      await expect(s.check()).resolves.toBeUndefined();
      const run = start(s);
      await waitFor('the first position', storedPosition);
      const ids = await enqueue(['granted']);
      await waitFor('the insert', () => idsOf(run.batches).length === 1);
      expect(idsOf(run.batches)).toEqual(ids);
      await run.stop();
    } finally {
      await pool.query(`DROP USER IF EXISTS '${user}'@'%'`);
    }
  });

  it('hands over exactly the committed inserts, in commit order, a position after whole transactions', async () => {
    const before = await enqueue(['early']);
    const run = start(source('a'));
    // The first start stores the binlog end: what was enqueued before is the poll's.
    await waitFor('the first position', storedPosition);
    const committed: string[] = [];
    committed.push(...(await enqueue(['a', 'b', null])));
    await enqueue(['rolled', 'back'], 'rollback');
    // Interleaved: the second transaction commits first, so its rows come first.
    const first = await pool.getConnection();
    const second = await pool.getConnection();
    try {
      await first.query('BEGIN');
      await second.query('BEGIN');
      const firstIds = await enqueue(['a', 'c'], 'commit', first);
      const secondIds = await enqueue(['b'], 'commit', second);
      await second.query('COMMIT');
      await first.query('COMMIT');
      committed.push(...secondIds, ...firstIds);
    } finally {
      first.release();
      second.release();
    }
    committed.push(...(await enqueue(['d'])));

    await waitFor('every committed insert', () => idsOf(run.batches).length >= committed.length);
    expect(idsOf(run.batches)).toEqual(committed);
    expect(idsOf(run.batches)).not.toContain(before[0]);
    const keys = run.batches.flatMap((b) => b.inserts.map((i) => i.key));
    expect(keys).toEqual(['a', 'b', null, 'b', 'a', 'c', 'd']);
    // Each batch's position is after its last transaction: resuming there replays none of it.
    for (const batch of run.batches) expect(batch.position).toMatch(/^.+\.\d+:\d+$/);
    await expectNever(
      'an insert of the rolled-back transaction',
      () => idsOf(run.batches).length > committed.length,
      500,
    );
  });

  it('resumes after the acknowledged position: nothing before it again, nothing after it lost', async () => {
    const s = source('a');
    const first = start(s);
    await waitFor('the first position', storedPosition);
    const acked = await enqueue(['k1', 'k2']);
    await waitFor('the first transaction', () => idsOf(first.batches).length === 2);
    const position = first.batches[0]?.position ?? '';
    await s.acknowledge(position);
    // Handed over but never acknowledged: it must come again after the restart.
    const unacked = await enqueue(['k3']);
    await waitFor('the second transaction', () => idsOf(first.batches).length === 3);
    await first.stop();
    // At the acknowledged position, or past other tables' transactions after it (other tests
    // share the server), never at or past the unacknowledged one.
    const stored = parseBinlogPosition((await storedPosition()) ?? '');
    expect(compareBinlogPositions(stored, parseBinlogPosition(position))).toBeGreaterThanOrEqual(0);
    expect(
      compareBinlogPositions(stored, parseBinlogPosition(first.batches[1]?.position ?? '')),
    ).toBeLessThan(0);

    const later = await enqueue(['k4']);
    const second = start(source('a'));
    await waitFor('the replay and the new one', () => idsOf(second.batches).length >= 2);
    await expectNever(
      'more than the unacknowledged and the new',
      () => idsOf(second.batches).length > 2,
      500,
    );
    expect(idsOf(second.batches)).toEqual([...unacked, ...later]);
    expect(idsOf(second.batches)).not.toContain(acked[0]);
  });

  it('gathers busy traffic into batches of several transactions, positions in order', async () => {
    // A slow consumer: the transactions committed meanwhile come together in the next batch.
    const run = start(source('a'), () => new Promise((done) => setTimeout(done, 30)));
    await waitFor('the first position', storedPosition);
    const committed: string[] = [];
    for (let i = 0; i < 100; i += 1) committed.push(...(await enqueue([`k${i % 7}`])));
    await waitFor('every insert', () => idsOf(run.batches).length === committed.length);
    expect(idsOf(run.batches)).toEqual(committed);
    expect(run.batches.length).toBeLessThan(50);
    const positions = run.batches.map((b) => parseBinlogPosition(b.position));
    for (let i = 1; i < positions.length; i += 1) {
      expect(compareBinlogPositions(positions[i - 1]!, positions[i]!)).toBeLessThan(0);
    }
  });

  it('pauses the binlog while the consumer is behind, and resumes it', async () => {
    let release: () => void = () => undefined;
    const blocked = new Promise<void>((done) => {
      release = done;
    });
    // A client that counts the source's pauses of its binlog connection.
    let pauses = 0;
    class CountingClient extends ZongJi {
      override start(options: BinlogClientStartOptions): void {
        super.start(options);
        const connection = this.connection;
        if (connection === null) return;
        const pause = connection.pause.bind(connection);
        connection.pause = () => {
          pauses += 1;
          pause();
        };
      }
    }
    // 2 inserts a batch: past 40 waiting the source pauses its binlog connection.
    const s = mysqlLogSource(context, {
      connection: binlogLogin,
      client: CountingClient,
      maxBatch: 2,
      retryMs: 200,
    });
    const run = start(s, () => blocked);
    await waitFor('the first position', storedPosition);
    const committed: string[] = [];
    for (let i = 0; i < 10; i += 1)
      committed.push(...(await enqueue(['p', 'q', 'r', 's', 't', 'u', 'v', 'w', 'x', 'y'])));
    await waitFor('the source to pause its binlog', () => pauses > 0);
    expect(run.batches.length).toBe(1);
    release();
    await waitFor('every insert', () => idsOf(run.batches).length === committed.length, {
      timeoutMs: 20_000,
    });
    expect(idsOf(run.batches)).toEqual(committed);
  });

  it('splits a large transaction into batches, positions only after whole transactions', async () => {
    const s = mysqlLogSource(context, {
      connection: binlogLogin,
      client: ZongJi,
      maxBatch: 3,
      retryMs: 200,
    });
    const run = start(s);
    await waitFor('the first position', storedPosition);
    const big = await enqueue(['a', 'b', 'c', 'd', 'e', 'f', 'g']);
    await waitFor('all seven', () => idsOf(run.batches).length === 7);
    expect(run.batches.map((b) => b.inserts.length)).toEqual([3, 3, 1]);
    // The parts before the last acknowledge nothing of the transaction.
    const [part1, part2, last] = run.batches.map((b) => parseBinlogPosition(b.position));
    expect(part2).toEqual(part1);
    expect(compareBinlogPositions(part1!, last!)).toBeLessThan(0);
    expect(idsOf(run.batches)).toEqual(big);
  });

  it('a standby takes over within seconds when the reader stops, and when its connection is killed', async () => {
    const a = source('a');
    const b = source('b');
    const runA = start(a);
    await waitFor('a to be active', async () => (await a.lag()).active);
    const runB = start(b);
    await enqueue(['x']);
    await waitFor('a to hand over', () => runA.batches.length === 1);
    await expectNever('b reading while a holds the lock', () => runB.batches.length > 0, 700);
    expect((await b.lag()).active).toBe(false);
    await a.acknowledge(runA.batches[0]?.position ?? '');

    await runA.stop();
    const stoppedAt = Date.now();
    await waitFor('b to take over', async () => (await b.lag()).active, { timeoutMs: 5_000 });
    expect(Date.now() - stoppedAt).toBeLessThan(5_000);
    const y = await enqueue(['y']);
    await waitFor('b to hand over y', () => idsOf(runB.batches).includes(y[0] ?? ''));

    // A third process stands by; b's lock connection dies under it.
    const c = source('c');
    const runC = start(c);
    const [rows] = await pool.query('SELECT IS_USED_LOCK(?) AS holder', [
      mysqlLogLockName(server.database, context.names),
    ]);
    const holder = Number((rows as { holder: unknown }[])[0]?.holder);
    expect(holder).toBeGreaterThan(0);
    await pool.query(`KILL ${holder}`);
    const killedAt = Date.now();
    await waitFor('c to take over', async () => (await c.lag()).active, { timeoutMs: 5_000 });
    expect(Date.now() - killedAt).toBeLessThan(5_000);
    const z = await enqueue(['z']);
    await waitFor('c to hand over z', () => idsOf(runC.batches).includes(z[0] ?? ''));
    await waitFor('b to stand by', async () => !(await b.lag()).active);
  });

  it('reconnects from the acknowledged position when its binlog connection is killed', async () => {
    // A client that remembers its instances, to find the binlog connection's thread.
    const clients: BinlogClient[] = [];
    class RecordingClient extends ZongJi {
      constructor(settings: Record<string, unknown>) {
        super(settings);
        clients.push(this);
      }
    }
    const s = mysqlLogSource(context, {
      connection: binlogLogin,
      client: RecordingClient,
      retryMs: 200,
    });
    const run = start(s);
    await waitFor('the first position', storedPosition);
    const acked = await enqueue(['one']);
    await waitFor('the first insert', () => idsOf(run.batches).length === 1);
    await s.acknowledge(run.batches[0]?.position ?? '');
    const unacked = await enqueue(['two']);
    await waitFor('the second insert', () => idsOf(run.batches).length === 2);

    const thread = await waitFor(
      'the binlog thread',
      // zongji's binlog connection is a mysql2 connection: its threadId is the server's.
      () => (clients[0]?.connection as { threadId?: number } | null | undefined)?.threadId,
    );
    await pool.query(`KILL ${thread}`);
    await waitFor('a new binlog connection', () => clients.length === 2);
    const after = await enqueue(['three']);
    await waitFor('the insert after the kill', () => idsOf(run.batches).includes(after[0] ?? ''));
    // The unacknowledged one again (replays are the dispatcher's to skip), the acknowledged never.
    expect(idsOf(run.batches)).toEqual([...acked, ...unacked, ...unacked, ...after]);
  });

  /** A proxy in front of the server, closed after the test (FaultProxy: `cut`, `restore`). */
  const proxied = async (): Promise<FaultProxy> => {
    const proxy = await FaultProxy.start(
      { host: server.host, port: server.port },
      { lifetimeMs: 120_000 },
    );
    proxies.push(proxy);
    return proxy;
  };

  it('stops at once when its link to the server goes silent, holding the lock or standing by', async () => {
    const said: string[] = [];
    // Statements are given a minute: the stop must not wait for them to time out.
    const patient = (owner: string, proxy: FaultProxy): MysqlBinlogSource =>
      mysqlLogSource(
        { ...context, owner },
        {
          connection: { ...binlogLogin, port: proxy.port },
          client: ZongJi,
          retryMs: 200,
          timeoutMs: 60_000,
          logger: { warn: () => undefined, log: (line) => said.push(`${owner}: ${line}`) },
        },
      );
    const toHolder = await proxied();
    const toStandby = await proxied();
    const holder = patient('a', toHolder);
    const standby = patient('b', toStandby);
    const runA = start(holder);
    await waitFor('a to be active', async () => (await holder.lag()).active);
    const runB = start(standby);
    await waitFor('b standing by', () => said.some((line) => /^b: .*standing by/.test(line)));

    // Silent: nothing passes, nothing is closed. Each sends something into the hole (a lock
    // check, a GET_LOCK) that will never be answered.
    toHolder.cut('blackhole');
    toStandby.cut('blackhole');
    await waitFor(
      'a check and a GET_LOCK unanswered',
      () => toHolder.blocked > 0 && toStandby.blocked > 0,
    );
    const stops = await Promise.allSettled([
      resolvesWithin('the reader stopping', runA.stop(), 10_000),
      resolvesWithin('the standby stopping', runB.stop(), 10_000),
    ]);
    expect(stops.flatMap((s) => (s.status === 'rejected' ? [String(s.reason)] : []))).toEqual([]);
  });

  it('gives up a binlog connection that sends nothing, not even a heartbeat, and reads again', async () => {
    const proxy = await proxied();
    const warnings: string[] = [];
    // The binlog connection through the proxy, the lock connection straight to the server.
    const clients: BinlogClient[] = [];
    let heartbeats = 0;
    class ProxiedClient extends ZongJi {
      constructor(settings: Record<string, unknown>) {
        super({ ...settings, port: proxy.port });
        clients.push(this);
        this.on('binlog', (event) => {
          if (event.getEventName() === 'heartbeat') heartbeats += 1;
        });
      }
    }
    const s = mysqlLogSource(context, {
      connection: binlogLogin,
      client: ProxiedClient,
      retryMs: 200,
      timeoutMs: 1_500,
      logger: { warn: (message) => warnings.push(message) },
    });
    const run = start(s);
    await waitFor('the first position', storedPosition);
    const before = await enqueue(['before']);
    await waitFor('the insert before the cut', () => idsOf(run.batches).length === 1);
    // The server sends heartbeats while the binlog is idle: silence then means a dead link.
    await waitFor('a heartbeat', () => heartbeats > 0);

    proxy.cut('blackhole');
    await waitFor('the silent binlog connection given up', () => clients.length > 1, {
      timeoutMs: 15_000,
    });
    // Its lock, on a connection of its own, was not lost: the binlog connection was.
    expect(warnings.join('\n')).toContain('the binlog connection sent nothing');
    expect(warnings.join('\n')).not.toContain('Lost the binlog lock');
    proxy.restore();
    const after = await enqueue(['after']);
    await waitFor('the insert after the cut', () => idsOf(run.batches).includes(after[0] ?? ''));
    expect(idsOf(run.batches)).toContain(before[0]);
  });

  it('reads on from the binlog end when the stored position is no longer on the server', async () => {
    const warnings: string[] = [];
    const s = mysqlLogSource(context, {
      connection: binlogLogin,
      client: ZongJi,
      retryMs: 200,
      logger: { warn: (message) => warnings.push(message) },
    });
    await s.acknowledge('mysql-bin.999999:4');
    const run = start(s);
    await waitFor('the warning', () => warnings.some((w) => w.includes('no longer on the server')));
    await waitFor(
      'the position at the end',
      async () => (await storedPosition()) !== 'mysql-bin.999999:4',
    );
    const ids = await enqueue(['after']);
    await waitFor('the insert', () => idsOf(run.batches).length === 1);
    expect(idsOf(run.batches)).toEqual(ids);
    expect(warnings.join('\n')).not.toContain('password');
  });

  it('moves its position past other tables’ transactions, never past an unacknowledged batch', async () => {
    const other = `${table}_other`;
    await pool.query(
      `CREATE TABLE ${other} (id INT AUTO_INCREMENT PRIMARY KEY, v INT) ENGINE=InnoDB`,
    );
    try {
      const s = source('a');
      const run = start(s);
      const first = await waitFor('the first position', storedPosition);
      await pool.query(`INSERT INTO ${other} (v) VALUES (1)`);
      await waitFor('the position to move', async () => (await storedPosition()) !== first);

      await enqueue(['held']);
      await waitFor('the batch', () => run.batches.length === 1);
      // Read once the batch is out: other tests' traffic on the server may have moved it before.
      const held = await storedPosition();
      expect(held).not.toBe(first);
      expect(held).not.toBe(run.batches[0]?.position);
      await pool.query(`INSERT INTO ${other} (v) VALUES (2)`);
      await expectNever(
        'a move past the unacknowledged batch',
        async () => (await storedPosition()) !== held,
        800,
      );

      await s.acknowledge(run.batches[0]?.position ?? '');
      await pool.query(`INSERT INTO ${other} (v) VALUES (3)`);
      await waitFor('the position past the last transaction', async () => {
        const now = await storedPosition();
        return now !== held && now !== run.batches[0]?.position;
      });
    } finally {
      await pool.query(`DROP TABLE IF EXISTS ${other}`);
    }
  });

  it('follows the binlog into its next file, and resumes there', async () => {
    const s = source('a');
    const first = start(s);
    await waitFor('the first position', storedPosition);
    const before = await enqueue(['before']);
    await waitFor('the first insert', () => idsOf(first.batches).length === 1);
    // Starts a new binlog file (FLUSH never purges one).
    await pool.query('FLUSH BINARY LOGS');
    const after = await enqueue(['after']);
    await waitFor('the insert in the new file', () => idsOf(first.batches).length === 2);
    expect(idsOf(first.batches)).toEqual([...before, ...after]);
    const [oldFile, newFile] = first.batches.map((b) => b.position.split(':')[0] ?? '');
    expect(newFile).not.toBe(oldFile);
    expect((await s.lag()).retainedBytes).toBeGreaterThan(0);
    await s.acknowledge(first.batches[1]?.position ?? '');
    await first.stop();

    const last = await enqueue(['last']);
    const second = start(source('a'));
    await waitFor('the insert after the restart', () => idsOf(second.batches).length === 1);
    await expectNever(
      'anything before the acknowledged position',
      () => idsOf(second.batches).length > 1,
      500,
    );
    expect(idsOf(second.batches)).toEqual(last);
  });

  it('never moves the stored position back for a late acknowledgement', async () => {
    // Two processes: the one that lost the lock may acknowledge after the one that took over.
    const a = source('a');
    const b = source('b');
    await b.acknowledge('mysql-bin.000002:100');
    await a.acknowledge('mysql-bin.000001:900');
    expect(await storedPosition()).toBe('mysql-bin.000002:100');
    await a.acknowledge('mysql-bin.000002:50');
    expect(await storedPosition()).toBe('mysql-bin.000002:100');
    await a.acknowledge('mysql-bin.000002:150');
    expect(await storedPosition()).toBe('mysql-bin.000002:150');
    // Past the sixth digit the server's names grow longer: still later.
    await b.acknowledge('mysql-bin.1000000:4');
    expect(await storedPosition()).toBe('mysql-bin.1000000:4');
  });

  it('reports the bytes of binlog not acknowledged', async () => {
    const s = source('a');
    const run = start(s);
    await waitFor('the first position', storedPosition);
    await enqueue(['lag']);
    await waitFor('the batch', () => run.batches.length === 1);
    // The bytes from the stored position to the end of the binlog, at a moment when the binlog
    // did not grow around the call (other tests write to the same server).
    const binlogFiles = async (): Promise<{ file: string; size: number }[]> => {
      const [rows] = await pool.query('SHOW BINARY LOGS');
      return (rows as { Log_name: string; File_size: unknown }[]).map((r) => ({
        file: r.Log_name,
        size: Number(r.File_size),
      }));
    };
    const lagMatchesTheBinlog = async (): Promise<{ bytes: number } | false> => {
      const before = JSON.stringify(await binlogFiles());
      const stored = parseBinlogPosition((await storedPosition()) ?? '');
      const lag = await s.lag();
      const files = await binlogFiles();
      if (JSON.stringify(files) !== before || !lag.active) return false;
      return (
        lag.retainedBytes === retainedBinlogBytes(stored, files) && { bytes: lag.retainedBytes }
      );
    };
    const { bytes } = await waitFor('the lag before the acknowledgement', lagMatchesTheBinlog);
    expect(bytes).toBeGreaterThan(0);
    const position = run.batches[0]?.position ?? '';
    await s.acknowledge(position);
    const stored = parseBinlogPosition((await storedPosition()) ?? '');
    expect(compareBinlogPositions(stored, parseBinlogPosition(position))).toBeGreaterThanOrEqual(0);
    await waitFor('the lag after it', lagMatchesTheBinlog);
  });
});
