import { Registry } from 'prom-client';
import { outboxTableNames } from '../../lib/internal/sql-identifier';
import {
  logTailing,
  mysqlLogTailingDdl,
  mysqlLogTailingDrop,
  type BinlogClientClass,
  type LogTailingOptions,
} from 'nestjs-outbox/log-tailing';
import { OutboxMetrics } from 'nestjs-outbox/prometheus';
import { mysqlLogLockName } from '../../lib/log-tailing/mysql/mysql-log-tailing.sql';
import { CapturingLogger } from '../support/capturing-logger';
import { DispatcherChild } from '../support/children/spawn-dispatcher';
import { TcpConsumer } from '../support/children/tcp-consumer';
import { serverConnection, testDatabase } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import {
  dispatchTestApp,
  mergeOutboxOptions,
  type HarnessOverrides,
  type OutboxApp,
} from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWithPackages } from '../support/services';
import { FaultProxy } from '../../lib/testing';
import { resolvesWithin, waitFor } from '../support/wait-for';

// The MariaDB binlog reader when its link to the server goes quiet without closing (a network
// cut, a frozen process), and what it tells the operator: through the real module, with the
// reader's connections behind a TCP proxy where the test cuts them. docs/log-tailing.md, "One
// reader, the others on standby".

/** A dispatcher that only the log can have fed (the table's sweep does not run in the test). */
const NO_SWEEP = 3_600_000;
const server = serverConnection('mariadb');

function loadZongJi(): BinlogClientClass {
  return (
    process.getBuiltinModule('node:module').createRequire(__filename)('@vlasky/zongji') as {
      default: BinlogClientClass;
    }
  ).default;
}

describeWithPackages(
  ['mariadb'],
  ['@vlasky/zongji'],
  'the MariaDB binlog reader under faults',
  () => {
    const scope = useOutboxScope(testDatabase('mariadb'), { tablePrefix: 'lt_myf' });

    /** A fresh outbox table with its position table, both dropped after the test. */
    async function tailedTable(): Promise<string> {
      const table = await scope.table('lt_myf');
      const names = outboxTableNames(table, null, 'backtick');
      scope.defer(async () => {
        for (const statement of mysqlLogTailingDrop(names)) await scope.ds.query(statement);
      });
      for (const statement of mysqlLogTailingDdl(names)) await scope.ds.query(statement);
      return table;
    }

    /**
     * A binlog user of the test's own, with a password and only the grants the reader needs;
     * dropped after the test. `url(port)` reaches the server directly or through a proxy.
     */
    async function binlogUser(table: string) {
      const user = `lt_myf_${process.pid}_${Math.floor(Math.random() * 1e6)}`;
      const password = `lt-myf-secret-${Math.floor(Math.random() * 1e9)}`;
      await scope.ds.query(`CREATE USER '${user}'@'%' IDENTIFIED BY '${password}'`);
      scope.defer(() => scope.ds.query(`DROP USER IF EXISTS '${user}'@'%'`));
      await scope.ds.query(`GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '${user}'@'%'`);
      await scope.ds.query(`GRANT SELECT ON ${server.database}.${table} TO '${user}'@'%'`);
      return {
        password,
        url: (port: number) =>
          `mysql://${user}:${encodeURIComponent(password)}@127.0.0.1:${port}/${server.database}`,
      };
    }

    /** A proxy in front of the server, closed after the test. */
    async function proxy(): Promise<FaultProxy> {
      const p = await FaultProxy.start(
        { host: server.host, port: server.port },
        { lifetimeMs: 120_000 },
      );
      scope.defer(() => p.close());
      return p;
    }

    /** An app reading the binlog of `table`, started, with a standby retry of 200 ms. */
    function tailingApp(
      table: string,
      publisher: RecordingPublisher,
      log: LogTailingOptions,
      overrides: HarnessOverrides & { logger?: CapturingLogger } = {},
    ): Promise<OutboxApp<RecordingPublisher>> {
      const { logger, ...options } = overrides;
      const spec = dispatchTestApp(publisher, options);
      return scope.open({
        ...spec,
        table,
        ...(logger === undefined ? {} : { logger }),
        options: mergeOutboxOptions(spec.options ?? {}, {
          autoStart: true,
          delivery: logTailing({
            sweepIntervalMs: NO_SWEEP,
            standbyRetryMs: 200,
            binlogClient: loadZongJi(),
            ...log,
          }),
        }),
      });
    }

    /** Resolves once the first reader of `table` stored the position it reads from. */
    async function started(table: string): Promise<void> {
      await waitFor('the reader stored its first position', async () => {
        const rows: unknown[] = await scope.ds.query(
          `SELECT 1 FROM \`${table}_log_position\` WHERE id = 1`,
        );
        return rows.length === 1;
      });
    }

    const reading = (h: OutboxApp) => async (): Promise<boolean> =>
      (await h.dispatcher.logLagStatus())?.active === true;

    it('a reader cut off silently says it lost the binlog lock, its gauge says it no longer reads, a standby takes over and delivers, and its app closes', async () => {
      const table = await tailedTable();
      const login = await binlogUser(table);
      const link = await proxy();
      const logs = new CapturingLogger();
      const cutPublisher = new RecordingPublisher();
      const cut = await tailingApp(
        table,
        cutPublisher,
        { connectionString: login.url(link.port) },
        { instanceId: 'cut-reader', logger: logs },
      );
      await waitFor('the reader reading', reading(cut));
      await started(table);
      const registry = new Registry();
      const metrics = new OutboxMetrics({ registry, sampleIntervalMs: 100 });
      metrics.startSampling(cut.outbox, cut.dispatcher);
      scope.defer(() => metrics.stopSampling());
      await waitFor('the reader gauge at 1', async () =>
        (await registry.metrics()).includes('outbox_log_reader_active 1'),
      );
      const standbyPublisher = new RecordingPublisher();
      // The same logger (Nest's is one per process): only the cut reader can lose the lock.
      const standby = await tailingApp(
        table,
        standbyPublisher,
        { connectionString: login.url(server.port) },
        { instanceId: 'standby', logger: logs },
      );
      const [before] = (await cut.commit([msg('k', { n: 1 })])) as [string];
      await waitFor('delivered by the reader', () => cutPublisher.sentIds.includes(before), {
        // What the dispatchers said, where a wait that times out does not tell why.
        describeState: () =>
          logs.lines.map((l) => `${l.level}: ${String(l.message)}`).join(' | ') || 'no log line',
      });
      expect(await reading(standby)()).toBe(false);

      // Nothing passes either way, and no connection is closed: no error reaches the reader.
      link.cut('blackhole');
      // The bounds are failure deadlines, well past the reader's (a check every 200 ms that may
      // take 5 s, readerTimeoutMs) and the server's (it ends a session silent for 7 s).
      await waitFor(
        'the reader saying it lost the lock',
        () => logs.linesOf(/lost the binlog lock/i, 'warn').length > 0,
        { timeoutMs: 20_000 },
      );
      await waitFor(
        'the reader gauge at 0',
        async () => (await registry.metrics()).includes('outbox_log_reader_active 0'),
        { timeoutMs: 20_000 },
      );
      await waitFor('the standby reading', reading(standby), { timeoutMs: 20_000 });
      const [after] = (await cut.commit([msg('k', { n: 2 })])) as [string];
      await waitFor('delivered by the standby', () => standbyPublisher.sentIds.includes(after));
      expect(cutPublisher.sentIds).toEqual([before]);
      expect(await reading(cut)()).toBe(false);

      await resolvesWithin('the cut app closing', cut.close(), 15_000);
      const said = logs.lines.map((l) => l.message).join('\n');
      expect(said).not.toContain(login.password);
    });

    it('a reader frozen (SIGSTOP) while the server writes binlog keeps the lock only until the server ends its silent session; the standby takes over and delivers', async () => {
      const consumer = new TcpConsumer();
      await consumer.start();
      scope.defer(() => consumer.stop().catch(() => undefined));
      const table = await tailedTable();
      // A child's start takes long on a busy machine: the deadline only fails a hang.
      const frozen = await DispatcherChild.start(
        {
          db: 'mariadb',
          table,
          instanceId: 'frozen-reader',
          tcpPort: consumer.port,
          dispatcher: { listen: false },
          logTailing: { sweepIntervalMs: NO_SWEEP, standbyRetryMs: 200 },
        },
        100_000,
      );
      scope.defer(() => frozen.kill('SIGKILL').catch(() => undefined));
      await started(table);
      const lock = mysqlLogLockName(server.database, outboxTableNames(table, null, 'backtick'));
      const holder = async (): Promise<number | null> => {
        const rows: { holder: unknown }[] = await scope.ds.query(
          'SELECT IS_USED_LOCK(?) AS holder',
          [lock],
        );
        const id = rows[0]?.holder;
        return id === null || id === undefined ? null : Number(id);
      };
      const childSession = await waitFor('the child holding the lock', holder);
      const publisher = new RecordingPublisher();
      const standby = await tailingApp(table, publisher, {}, { instanceId: 'standby' });
      expect(await reading(standby)()).toBe(false);

      // Its process stops, its kernel keeps the connections open: the server sees a quiet session.
      process.kill(frozen.pid, 'SIGSTOP');
      // A busy server: binlog of another table, more than the frozen reader's socket holds, so the
      // server's sending to it blocks (a standby that asked under the same replica id would wait
      // for that send to time out, net_write_timeout, 60 s).
      const busy = `${table}_busy`;
      scope.defer(() => scope.ds.query(`DROP TABLE IF EXISTS \`${busy}\``));
      await scope.ds.query(`CREATE TABLE \`${busy}\` (id INT PRIMARY KEY, body LONGTEXT)`);
      for (let i = 0; i < 64; i++) {
        await scope.ds.query(`INSERT INTO \`${busy}\` VALUES (?, REPEAT('x', 500000))`, [i]);
      }
      await waitFor('the standby reading', reading(standby), { timeoutMs: 30_000 });
      expect(await holder()).not.toBe(childSession);
      const [id] = (await standby.commit([msg('k', { frozen: true })])) as [string];
      // A failure deadline, not a timing claim: the new reader first reads the binlog the other
      // specs wrote since the frozen one's position, which takes seconds on a loaded machine.
      await waitFor('delivered by the standby', () => publisher.sentIds.includes(id), {
        timeoutMs: 30_000,
      });
    }, 180_000);

    it('logs at LOG level when its reader starts reading, stands by and takes over, naming the table and the lock, never the password', async () => {
      const table = await tailedTable();
      const login = await binlogUser(table);
      const lock = mysqlLogLockName(server.database, outboxTableNames(table, null, 'backtick'));
      // One logger for both apps (Nest's logger is one per process): the lines tell them apart.
      const logs = new CapturingLogger();
      // The reader's own lines (the dispatcher's start line names the binlog too).
      const binlogLines = () =>
        logs
          .linesOf(/binlog/, 'log')
          .map((l) => l.message)
          .filter((m) => !m.startsWith('Dispatcher started'));
      const log = { connectionString: login.url(server.port) };
      const a = await tailingApp(table, new RecordingPublisher(), log, {
        instanceId: 'first',
        logger: logs,
      });
      await waitFor('the reading line', () => binlogLines().length === 1);
      const b = await tailingApp(table, new RecordingPublisher(), log, {
        instanceId: 'second',
        logger: logs,
      });
      await waitFor('the standby line', () => binlogLines().length === 2);
      expect(await reading(b)()).toBe(false);
      await a.close();
      await waitFor('the takeover line', () => binlogLines().length === 3);

      const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      const table_ = escaped(`${server.database}.${table}`);
      const lock_ = escaped(lock);
      const position = '[^ ]+\\.\\d+:\\d+';
      expect(binlogLines()).toEqual([
        expect.stringMatching(
          new RegExp(`^Reading the binlog of ${table_} from ${position} \\(lock ${lock_}\\)`),
        ),
        expect.stringMatching(
          new RegExp(
            `^The binlog of ${table_} is read by another process \\(it holds the lock ${lock_}\\): standing by, asking every 200 ms`,
          ),
        ),
        expect.stringMatching(
          new RegExp(
            `^Reading the binlog of ${table_} from ${position} \\(lock ${lock_}, taken over from another process\\)`,
          ),
        ),
      ]);
      const said = logs.lines.map((l) => l.message).join('\n');
      expect(said).not.toContain(login.password);
    });
  },
);
