import { Client } from 'pg';
import { AsyncLocalStorage } from 'node:async_hooks';
import type { LoggerService } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { OutboxOptionsError, type OutboxRecord } from '../../lib';
import { outboxTableNames } from '../../lib/internal/sql-identifier';
import {
  logTailing,
  logTailingMigration,
  mysqlLogTailingDdl,
  mysqlLogTailingDrop,
  postgresLogNames,
  postgresLogTailingDdl,
  type BinlogClientClass,
  type LogTailingOptions,
} from 'nestjs-outbox/log-tailing';
import {
  readAttempts,
  serverConnection,
  testDatabase,
  TEST_DATABASES,
  type TestDatabase,
} from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import {
  dispatchTestApp,
  mergeOutboxOptions,
  type HarnessOverrides,
  type OutboxApp,
} from '../support/outbox-harness';
import { CLAIM_LOOP } from '../support/test-claims';
import { useOutboxScope, type OutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { DispatcherChild } from '../support/children/spawn-dispatcher';
import { TcpConsumer } from '../support/children/tcp-consumer';
import { describeWith, describeWithPackages } from '../support/services';
import { runOutboxCli } from '../../lib/operations/cli/outbox-cli';
import { TerminusModule } from '@nestjs/terminus';
import { Registry } from 'prom-client';
import { OutboxHealthIndicator } from 'nestjs-outbox/terminus';
import { OutboxMetrics } from 'nestjs-outbox/prometheus';
import { expectNever, sleep, waitFor } from '../support/wait-for';
import { CapturingLogger } from '../support/capturing-logger';

// Log tailing (docs/log-tailing.md), through the real OutboxModule, on each database with a log:
// the dispatcher learns of new messages from PostgreSQL's logical replication or the MySQL/MariaDB
// binlog and leases them by id; the table stays the record. Each promise of the polling
// dispatcher is checked once for both, with the log as the source of new messages: the table's
// own poll (the sweep) is set to an hour where a test proves what the log path did, so that the
// poll cannot have done it instead, and short where retries must come back through the table.
// What differs per database (the log objects, the reader's login, the CLI's words) is in its
// target below. Every slot, publication and position table a test makes is dropped after it
// (an unread slot keeps WAL forever), and once more after the block in case a test failed early.

/** A dispatcher that only the log can have fed (the sweep does not run during the test). */
const NO_SWEEP = 3_600_000;

// zongji is an ES module: jest's module system cannot load it, so the test asks Node's own
// require for it and hands the class over, as `binlogClient` documents for such runners.
function loadZongJi(): BinlogClientClass {
  return (
    process.getBuiltinModule('node:module').createRequire(__filename)('@vlasky/zongji') as {
      default: BinlogClientClass;
    }
  ).default;
}

/** What a log-tailing test needs to know of one database. */
interface LogTarget {
  readonly name: 'postgres' | 'mariadb';
  readonly db: TestDatabase;
  /** The suite's describe: the service, and the npm packages the reader loads. */
  readonly describe: (name: string, fn: () => void) => void;
  /** The prefix of the tables this suite makes. */
  readonly prefix: string;
  /** The database's own `logTailing()` options (the binlog client on MySQL/MariaDB). */
  logOptions(): LogTailingOptions;
  /** The log object(s) a tailed table needs, as `outbox schema migrate --log-tailing` makes them. */
  readonly logObject: string;
  /** The command the refusal without the log object names. */
  readonly setupCommand: string;
  /** What the lag gauge measures, for the test's name. */
  readonly retained: string;
  /** Makes the log object(s) of `table`. */
  setUp(ds: DataSource, table: string): Promise<void>;
  /** Drops the log object(s) of `table` once no reader holds them; nothing if there are none. */
  drop(ds: DataSource, table: string): Promise<void>;
  /** Whether the log object(s) of `table` exist (the publication covers it / the position table). */
  exists(ds: DataSource, table: string): Promise<boolean>;
  /**
   * Resolves once the first reader of `table` reads from a point that later commits come after
   * (MySQL/MariaDB: it starts at the binlog's end and stores that position; what is committed
   * before is left to the poll). PostgreSQL's slot is made when the app starts.
   */
  started(ds: DataSource, table: string): Promise<void>;
}

const postgresTarget: LogTarget = {
  name: 'postgres',
  db: testDatabase('postgres'),
  describe: (name, fn) => describeWith(['postgres'], name, fn),
  prefix: 'lt_pg',
  logOptions: () => ({}),
  logObject: 'publication',
  setupCommand: 'outbox log setup',
  retained: "the slot's retained WAL",
  async setUp(ds, table) {
    const statements = postgresLogTailingDdl(
      outboxTableNames(table, null, 'double'),
      postgresNames(table).publication,
    );
    for (const statement of statements) await ds.query(statement);
  },
  async drop(ds, table) {
    const { slot, publication } = postgresNames(table);
    // The reader of a closed app lets go of the slot within moments.
    await waitFor(
      `slot ${slot} released`,
      async () => {
        const rows: { active: boolean }[] = await ds.query(
          'SELECT active FROM pg_replication_slots WHERE slot_name = $1',
          [slot],
        );
        return rows.every((r) => !r.active);
      },
      { timeoutMs: 15_000 },
    );
    await ds.query(
      'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1',
      [slot],
    );
    await ds.query(`DROP PUBLICATION IF EXISTS "${publication}"`);
  },
  async exists(ds, table) {
    const rows: unknown[] = await ds.query(
      'SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND tablename = $2',
      [postgresNames(table).publication, table],
    );
    return rows.length === 1;
  },
  started: () => Promise.resolve(),
};

const mariadbTarget: LogTarget = {
  name: 'mariadb',
  db: testDatabase('mariadb'),
  describe: (name, fn) => describeWithPackages(['mariadb'], ['@vlasky/zongji'], name, fn),
  prefix: 'lt_my2',
  logOptions: () => ({ binlogClient: loadZongJi() }),
  logObject: 'position table',
  setupCommand: 'outbox log setup',
  retained: 'the binlog after the stored position',
  async setUp(ds, table) {
    for (const statement of mysqlLogTailingDdl(outboxTableNames(table, null, 'backtick'))) {
      await ds.query(statement);
    }
  },
  async drop(ds, table) {
    for (const statement of mysqlLogTailingDrop(outboxTableNames(table, null, 'backtick'))) {
      await ds.query(statement);
    }
  },
  async exists(ds, table) {
    const rows: unknown[] = await ds.query(
      'SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?',
      [`${table}_log_position`],
    );
    return rows.length === 1;
  },
  async started(ds, table) {
    await waitFor('the reader stored its first position', async () => {
      const rows: unknown[] = await ds.query(
        `SELECT 1 FROM \`${table}_log_position\` WHERE id = 1`,
      );
      return rows.length === 1;
    });
  },
};

/** The slot and publication of `table` in the test database. */
function postgresNames(table: string) {
  return postgresLogNames('public', table, serverConnection('postgres').database);
}

/** The suites the selected databases (OUTBOX_TEST_DATABASES) run; SQLite has no log. */
const TARGETS = [postgresTarget, mariadbTarget].filter((t) =>
  TEST_DATABASES.some((db) => db.name === t.name),
);

for (const target of TARGETS) {
  const { db } = target;
  target.describe(`log tailing on ${target.name}`, () => {
    // The tailer that leases what the log names, by id: PostgreSQL's 'leases' mode (the default
    // on MySQL/MariaDB). On delivery partitions, PostgreSQL's default, the log hands rows to the
    // partition owner instead: test/log-tailing/log-partitions.spec.ts.
    const scope = useOutboxScope(db, { tablePrefix: target.prefix, options: CLAIM_LOOP });
    const apps = tailingApps(scope, target);
    const { tailedTable, tailingApp, enqueuer } = apps;

    it('publishes every committed message once, per key in commit order, and never a rolled-back one', async () => {
      const table = await tailedTable();
      const publisher = new RecordingPublisher();
      const h = await tailingApp(table, publisher);
      await target.started(scope.ds, table);
      const committed: string[] = [];
      const byKey = new Map<string, string[]>();
      for (let tx = 0; tx < 6; tx++) {
        const messages = Array.from({ length: 10 }, (_, i) =>
          msg(i % 5 === 4 ? null : `k${(tx + i) % 3}`, { tx, i }),
        );
        const ids = await h.commit(messages);
        committed.push(...ids);
        ids.forEach((id, i) => {
          const key = messages[i]?.key;
          if (typeof key === 'string') byKey.set(key, [...(byKey.get(key) ?? []), id]);
        });
      }
      const ghosts: string[] = [];
      await expect(
        scope.ds.transaction(async (manager) => {
          ghosts.push(...(await h.outbox.enqueue([msg('k0', { ghost: 1 }), msg(null)], manager)));
          throw new Error('rolled back');
        }),
      ).rejects.toThrow('rolled back');

      await waitFor('every message delivered', delivered(h));
      expect([...publisher.sentIds].sort()).toEqual([...committed].sort());
      expect(new Set(publisher.sentIds).size).toBe(committed.length);
      for (const [key, ids] of byKey) expect(publisher.sentForKey(key)).toEqual(ids);
      for (const ghost of ghosts) expect(publisher.attemptsOf(ghost)).toBe(0);
      const rows = await h.rows();
      expect(rows).toHaveLength(committed.length);
      expect(rows.every((r) => r.attempts === 1 && r.lockedBy === null)).toBe(true);
      expect((await h.dispatcher.logLagStatus())?.active).toBe(true);
    });

    if (target.name === 'postgres') {
      it('sends no NOTIFY at enqueue: only a polling dispatcher LISTENs, the log brings the rows', async () => {
        const table = await tailedTable();
        const publisher = new RecordingPublisher();
        const h = await tailingApp(table, publisher);
        const { host, port, username, password, database } = serverConnection('postgres');
        const listener = new Client({ host, port, user: username, password, database });
        await listener.connect();
        try {
          const channel = `public_${table}`;
          const payloads: string[] = [];
          listener.on('notification', (n) => payloads.push(n.payload ?? ''));
          await listener.query(`LISTEN "${channel}"`);
          const [id] = await h.commit([msg('k', { n: 1 })]);
          // Notifications arrive in commit order: the marker, committed after the enqueue's
          // transaction, comes first only when that transaction sent none.
          await scope.ds.query('SELECT pg_notify($1, $2)', [channel, 'marker']);
          await waitFor('the marker notification', () => payloads.length > 0);
          expect(payloads).toEqual(['marker']);
          await waitFor('the message delivered through the log', () =>
            publisher.sentIds.includes(id as string),
          );
        } finally {
          await listener.end();
        }
      });
    }
    it('delivers outside the async context of the caller of start() (nestjs-cls, MikroORM), as the poll does', async () => {
      // A request's store (nestjs-cls, MikroORM's RequestContext) around start(): the reader it
      // starts must not carry it into the messages other requests enqueue later.
      const request = new AsyncLocalStorage<{ user: string }>();
      const seen: (string | undefined)[] = [];
      const publisher = new (class extends RecordingPublisher {
        override publish(messages: readonly OutboxRecord[], signal: AbortSignal) {
          for (const m of messages) seen.push(request.getStore()?.user ?? m.messageId);
          return super.publish(messages, signal);
        }
      })();
      const table = await tailedTable();
      const h = await tailingApp(table, publisher, {}, { autoStart: false });
      await request.run({ user: 'alice' }, () => h.dispatcher.start());
      await target.started(scope.ds, table);

      const ids = await request.run({ user: 'bob' }, () =>
        h.commit([msg('k', { n: 1 }), msg(null, { n: 2 })]),
      );

      await waitFor('every message delivered', delivered(h));
      expect([...publisher.sentIds].sort()).toEqual([...ids].sort());
      // Each publish saw no request's store: neither the starter's nor the enqueuer's.
      expect([...seen].sort()).toEqual([...ids].sort());
    });

    it('says at start that it tails the log, naming the reader and the sweep, not the poll interval', async () => {
      const logs = new CapturingLogger();
      const table = await tailedTable();
      const h = await tailingApp(table, new RecordingPublisher(), {}, {}, logs);
      await h.close();

      const started = logs.linesOf(/^Dispatcher started/, 'log').map((l) => l.message);
      const reader =
        target.name === 'postgres' ? 'PostgreSQL logical replication' : 'MySQL/MariaDB binlog';
      expect(started).toEqual([
        expect.stringContaining(
          `: log tailing (${reader}), table swept every ${NO_SWEEP} ms, batchSize`,
        ),
      ]);
      expect(started[0]).not.toMatch(/poll/);
    });

    it("under 'block', a failing head holds its key in the table; later messages follow it in order, other keys flow", async () => {
      const table = await tailedTable();
      const publisher = new RecordingPublisher();
      // Retries come back through the table, swept when the first is due (no periodic sweep here).
      const h = await tailingApp(table, publisher);
      await target.started(scope.ds, table);
      const [a1] = await h.commit([msg('a', { n: 1 })]);
      publisher.fail(a1 as string, 'retryable', { times: 2 });
      const b = await h.commit([msg('b', { n: 1 }), msg('b', { n: 2 })]);
      const a23 = [
        ...(await h.commit([msg('a', { n: 2 })])),
        ...(await h.commit([msg('a', { n: 3 })])),
      ];
      await waitFor('the b messages delivered', () => publisher.sentForKey('b').length === 2);
      expect(publisher.sentForKey('b')).toEqual(b);
      await waitFor('every message delivered', delivered(h), { timeoutMs: 20_000 });
      expect(publisher.sentForKey('a')).toEqual([a1, ...a23]);
      // a2 and a3 were not handed to the broker before a1 went through.
      const calls = publisher.calls.map((c) => c.map((r) => r.messageId));
      const a1Ok = calls.findIndex((c) => c.includes(a1 as string)) + 2; // its third call
      const firstA2 = calls.findIndex((c) => c.includes(a23[0] as string));
      expect(firstA2).toBeGreaterThanOrEqual(a1Ok);
      expect((await h.row(a1 as string)).attempts).toBe(3);
      const history = (await readAttempts(scope.ds, table)).filter((r) => r.messageId === a1);
      expect(history.map((r) => r.outcome)).toEqual(['retry', 'retry']);
    });

    // A head dies two ways: its retries run out, or the broker refuses it for good.
    it.each([
      { failure: 'retryable', how: 'after its retries', attempts: 2, outcomes: ['retry', 'dead'] },
      { failure: 'permanent', how: 'on a permanent failure', attempts: 1, outcomes: ['dead'] },
    ] as const)(
      "under 'block' a head dead $how holds its key and its dead letter is recorded; under 'skip' the key moves on",
      async ({ failure, attempts, outcomes }) => {
        for (const onDeadLetter of ['block', 'skip'] as const) {
          const table = await tailedTable();
          const publisher = new RecordingPublisher();
          const h = await tailingApp(
            table,
            publisher,
            { sweepIntervalMs: 100 },
            {
              ordering: { onDeadLetter },
              retry: { maxAttempts: 2, initialDelayMs: 50, jitter: 0 },
            },
          );
          await target.started(scope.ds, table);
          const [a1] = await h.commit([msg('a', { n: 1 })]);
          publisher.fail(a1 as string, failure);
          const [a2] = await h.commit([msg('a', { n: 2 })]);
          const [c1] = await h.commit([msg('c', { n: 1 })]);
          await waitFor('c delivered', () => publisher.sentIds.includes(c1 as string));
          await waitFor('a1 dead', async () => (await h.row(a1 as string)).status === 'dead', {
            timeoutMs: 15_000,
          });
          expect((await h.row(a1 as string)).attempts).toBe(attempts);
          const history = (await readAttempts(scope.ds, table)).filter((r) => r.messageId === a1);
          expect(history.map((r) => r.outcome)).toEqual(outcomes);
          if (onDeadLetter === 'skip') {
            await waitFor('a2 delivered after the dead a1', () =>
              publisher.sentIds.includes(a2 as string),
            );
          } else {
            await expectNever(
              'a2 published behind the dead a1',
              () => publisher.attemptsOf(a2 as string) > 0,
              1_000,
            );
            expect(['pending', 'waiting']).toContain((await h.row(a2 as string)).status);
          }
          await h.close();
        }
      },
    );

    it('retries with backoff through the table and dead-letters after maxAttempts, as polling does', async () => {
      const table = await tailedTable();
      const publisher = new TimedPublisher();
      // The default sweep interval (5 s): the retries come back when due, not at the next sweep.
      const h = await tailingApp(
        table,
        publisher,
        { sweepIntervalMs: undefined },
        { retry: { maxAttempts: 3, initialDelayMs: 200, factor: 2, jitter: 0 } },
      );
      await target.started(scope.ds, table);
      const [bad] = await h.commit([msg(null, { bad: true })]);
      publisher.fail(bad as string, 'retryable');
      const [good] = await h.commit([msg(null, { good: true })]);
      await waitFor(
        'the failing message dead',
        async () => (await h.row(bad as string)).status === 'dead',
        { timeoutMs: 15_000 },
      );
      const row = await h.row(bad as string);
      expect(row.attempts).toBe(3);
      expect(publisher.attemptsOf(bad as string)).toBe(3);
      expect(publisher.sentIds).toEqual([good]);
      const history = (await readAttempts(scope.ds, table)).filter((r) => r.messageId === bad);
      expect(history.map((r) => r.outcome)).toEqual(['retry', 'retry', 'dead']);
      // The backoff held: the attempts were at least the delays apart (200 ms, then 400 ms).
      const times = publisher.times.get(bad as string) ?? [];
      expect((times[1] as number) - (times[0] as number)).toBeGreaterThanOrEqual(150);
      expect((times[2] as number) - (times[1] as number)).toBeGreaterThanOrEqual(350);
      // …and came back when due, not at the next sweep of the table (5 s).
      expect((times[2] as number) - (times[0] as number)).toBeLessThan(4_000);
    });

    it("delivers a key's message the log names behind a head that another process left backing off, once the head is due: not at the next sweep", async () => {
      const table = await tailedTable();
      const retry = { retry: { maxAttempts: 5, initialDelayMs: 3_000, factor: 2, jitter: 0 } };
      const first = new RecordingPublisher();
      const a = await tailingApp(table, first, {}, { ...retry, instanceId: 'first' });
      await target.started(scope.ds, table);
      first.failNext('retryable');
      const [head] = await a.commit([msg('k', { n: 1 })]);
      await waitFor('the head backing off', async () => {
        const row = await a.row(head as string);
        return row.attempts === 1 && row.status === 'pending' && row.lockedBy === null;
      });
      // Its retry timer goes with this process; the log's position is past the head.
      await a.close();
      const second = new RecordingPublisher();
      const b = await tailingApp(table, second, {}, { ...retry, instanceId: 'second' });
      await waitFor(
        'the second reading',
        async () => (await b.dispatcher.logLagStatus())?.active === true,
      );
      // Named by the log while the head is not due: the lease by id leaves it to the table, and
      // the sweep runs once an hour here.
      const [next] = await b.commit([msg('k', { n: 2 })]);
      await waitFor('both delivered', () => second.sentIds.length === 2, { timeoutMs: 15_000 });
      expect(second.sentIds).toEqual([head, next]);
    });

    it('pauses through a broker outage without spending attempts, then delivers everything', async () => {
      const table = await tailedTable();
      const publisher = new RecordingPublisher();
      const h = await tailingApp(
        table,
        publisher,
        { sweepIntervalMs: 200 },
        { dispatcher: { maxOutagePauseMs: 500 } },
      );
      await target.started(scope.ds, table);
      publisher.goDown();
      const ids = [
        ...(await h.commit([msg('k', { n: 1 }), msg(null, { n: 2 })])),
        ...(await h.commit([msg('k', { n: 3 })])),
      ];
      await waitFor('the outage seen', () => h.outages.length > 0);
      await expectNever(
        'a message published during the outage',
        () => publisher.sentIds.length > 0,
        500,
      );
      publisher.comeBack();
      await waitFor('every message delivered', delivered(h), { timeoutMs: 15_000 });
      expect([...publisher.sentIds].sort()).toEqual([...ids].sort());
      expect(publisher.sentForKey('k')).toEqual([ids[0], ids[2]]);
      // The outage gave every attempt back: each row counts only the one that delivered it.
      expect((await h.rows()).map((r) => r.attempts)).toEqual([1, 1, 1]);
    });

    it('after a shutdown mid-batch, the next reader replays from the acknowledged position: nothing lost, nothing delivered twice', async () => {
      const table = await tailedTable();
      const first = new RecordingPublisher().slow(300);
      const firstLog = new CapturingLogger();
      const a = await tailingApp(
        table,
        first,
        {},
        { dispatcher: { batchSize: 5, shutdownTimeoutMs: 100 } },
        firstLog,
      );
      await target.started(scope.ds, table);
      const early = await a.commit(Array.from({ length: 20 }, (_, i) => msg(`k${i % 4}`, { i })));
      // One batch of five through, the next one publishing: the transaction is not acknowledged.
      await waitFor('a first batch delivered', () => first.sentIds.length >= 5);
      await a.close();
      // A graceful shutdown: no lease left. The batch cut short answered the abort by throwing,
      // which says nothing of what reached the broker: its messages count one timed-out attempt
      // (as on the poll, test/dispatch/shutdown.spec.ts); the rest were never tried.
      const afterStop = await a.rows();
      expect(afterStop.filter((r) => r.lockedBy !== null)).toEqual([]);
      const tried = afterStop.filter((r) => r.status === 'pending' && r.attempts > 0);
      expect(tried.every((r) => r.attempts === 1)).toBe(true);
      // Committed while no process reads the log: the slot keeps it, the stored position is before it.
      const late = await a.commit(
        Array.from({ length: 10 }, (_, i) => msg(`k${i % 4}`, { late: i })),
      );
      const second = new RecordingPublisher();
      // Its log is printed if it does not deliver: this test failed now and then under load
      // (rows of the cut batch backing off, their keys' later rows parked, nothing sent in 45 s).
      const secondLog = new CapturingLogger();
      const b = await tailingApp(table, second, {}, { instanceId: 'second' }, secondLog);
      let left = '';
      await waitFor(
        'every message delivered',
        async () => {
          const rows = await b.rows();
          left = rows
            .filter((r) => r.status !== 'delivered')
            .map((r) => `${r.id} ${r.status} attempts ${r.attempts} locked ${r.lockedBy ?? '-'}`)
            .join(', ');
          return left === '';
        },
        {
          timeoutMs: 45_000,
          describeState: () =>
            `not delivered: ${left}; second sent ${second.sentIds.length}; its log: ${linesOf(secondLog)}; the first's: ${linesOf(firstLog)}`,
        },
      );
      const all = [...early, ...late];
      const firstSent = new Set(first.sentIds);
      expect(firstSent.size).toBeGreaterThanOrEqual(5);
      expect(second.sentIds.filter((id) => firstSent.has(id))).toEqual([]);
      expect([...first.sentIds, ...second.sentIds].sort()).toEqual([...all].sort());
      for (let k = 0; k < 4; k++) {
        const key = `k${k}`;
        expect([...first.sentForKey(key), ...second.sentForKey(key)]).toEqual(
          await orderOf(b, key),
        );
      }
    });

    it('a standby takes over within seconds when the reading instance stops during a drain', async () => {
      const table = await tailedTable();
      const publisherA = new RecordingPublisher().slow(40);
      const publisherB = new RecordingPublisher().slow(40);
      const overrides = { dispatcher: { batchSize: 10, shutdownTimeoutMs: 2_000 } };
      const a = await tailingApp(table, publisherA, {}, { ...overrides, instanceId: 'tailer-a' });
      await waitFor('a reading', async () => (await a.dispatcher.logLagStatus())?.active === true);
      await target.started(scope.ds, table);
      const b = await tailingApp(table, publisherB, {}, { ...overrides, instanceId: 'tailer-b' });
      expect((await b.dispatcher.logLagStatus())?.active).toBe(false);
      const writer = await enqueuer(table);
      const committed: string[] = [];
      let writing = true;
      const writes = (async () => {
        for (let tx = 0; writing && tx < 60; tx++) {
          committed.push(
            ...(await writer.commit(Array.from({ length: 5 }, (_, i) => msg(`k${i}`, { tx })))),
          );
          await sleep(20);
        }
      })();
      await waitFor('a publishing', () => publisherA.sentIds.length >= 30);
      expect(publisherB.sentIds).toEqual([]);
      const stoppedAt = Date.now();
      await a.close();
      await waitFor('b reading', async () => (await b.dispatcher.logLagStatus())?.active === true, {
        timeoutMs: 10_000,
      });
      const tookOverMs = Date.now() - stoppedAt;
      writing = false;
      await writes;
      await waitFor('every message delivered', delivered(b), { timeoutMs: 30_000 });
      expect(tookOverMs).toBeLessThan(5_000);
      const sentA = publisherA.sentIds;
      const sentB = publisherB.sentIds;
      expect(sentB.length).toBeGreaterThan(0);
      expect(sentB.filter((id) => sentA.includes(id))).toEqual([]);
      expect([...sentA, ...sentB].sort()).toEqual([...committed].sort());
      for (let k = 0; k < 5; k++) {
        expect([...publisherA.sentForKey(`k${k}`), ...publisherB.sentForKey(`k${k}`)]).toEqual(
          await orderOf(b, `k${k}`),
        );
      }
    });

    it('a standby takes over within seconds when the reading process is SIGKILLed mid-batch; nothing is lost, per-key order holds', async () => {
      const consumer = new TcpConsumer();
      await consumer.start();
      scope.defer(() => consumer.stop().catch(() => undefined));
      const table = await tailedTable();
      // A plain Node process: on MySQL/MariaDB it loads @vlasky/zongji itself (no binlogClient).
      // Its start takes long on a busy machine: the deadline only fails a hang.
      const doomed = await DispatcherChild.start(
        {
          db: target.name,
          table,
          instanceId: 'doomed-tailer',
          tcpPort: consumer.port,
          // A database call may take a second on a loaded host: with the 100 ms these lease
          // and publish timeouts left it, the child paused for an outage before it published.
          dispatcher: {
            claims: 'leases',
            leaseMs: 5_000,
            publishTimeoutMs: 2_800,
            dbTimeoutMs: 1_000,
            batchSize: 20,
            listen: false,
          },
          hangAfter: 25,
          logTailing: { sweepIntervalMs: NO_SWEEP, standbyRetryMs: 200 },
        },
        100_000,
      );
      scope.defer(() => doomed.kill('SIGKILL').catch(() => undefined));
      await target.started(scope.ds, table);
      const writer = await enqueuer(table);
      const ids: string[] = [];
      for (let tx = 0; tx < 12; tx++) {
        ids.push(
          ...(await writer.commit(Array.from({ length: 10 }, (_, k) => msg(`key-${k}`, { tx })))),
        );
      }
      const hanging = await doomed.waitFor('hanging', 20_000);
      // The standby, in this process, started once the child hangs mid-batch (still holding the
      // slot, or the binlog reader's lock): started before, its sweep of the table could deliver
      // so much of what the child had not read yet from the log, on a loaded host, that the child
      // never reached its 25th message (a CI run on MariaDB waited 20 s for the hang).
      const survivor = new TimedPublisher();
      const b = await tailingApp(
        table,
        survivor,
        { sweepIntervalMs: 1_000 },
        { instanceId: 'survivor', dispatcher: { leaseMs: 1_500 } },
      );
      expect((await b.dispatcher.logLagStatus())?.active).toBe(false);
      // (Its sweep of the table may already publish what the child has not leased: both paths
      // lease heads of key under row locks, so that is no duplicate and keeps the order.)
      // The child's batches in flight: leased to it, published in part (in rounds), never
      // settled. It keeps up to batchesInFlight of them, and may lease another between this look
      // and the kill, so look again once it is dead (before its leases could be taken over).
      const leasedToChildNow = async () =>
        (await b.rows())
          .filter((r) => r.lockedBy === 'doomed-tailer' && r.status === 'pending')
          .map((r) => r.messageId);
      const leasedBefore = await leasedToChildNow();
      await doomed.kill('SIGKILL');
      const killedAt = Date.now();
      const leasedToChild = [...leasedBefore, ...(await leasedToChildNow())];
      await waitFor(
        'the standby reading',
        async () => (await b.dispatcher.logLagStatus())?.active === true,
        { timeoutMs: 10_000, intervalMs: 50 },
      );
      const takeoverMs = Date.now() - killedAt;
      await waitFor('every row delivered', delivered(b), { timeoutMs: 30_000 });
      expect(takeoverMs).toBeLessThan(5_000);

      const sentByChild = consumer.counts();
      const sentBySurvivor = survivor.sentIds;
      // Nothing lost; the only messages published twice are the ones the child sent and never settled.
      expect(ids.filter((id) => !sentByChild.has(id) && !sentBySurvivor.includes(id))).toEqual([]);
      const unsettled = new Set(leasedToChild);
      const twice = sentBySurvivor.filter((id) => sentByChild.has(id));
      expect(twice.filter((id) => !unsettled.has(id))).toEqual([]);
      expect(hanging.published.filter((id) => !twice.includes(id))).toEqual([]);
      expect(new Set(sentBySurvivor).size).toBe(sentBySurvivor.length);
      // Per key, first publications in commit order, the child's and the survivor's in the order
      // they happened: the survivor's sweep may deliver a key's first messages before the child
      // leases its later ones (one clock: the consumer and the survivor run in this process).
      const firstAt = new Map<string, number>();
      for (const a of consumer.arrivals)
        if (!firstAt.has(a.messageId)) firstAt.set(a.messageId, a.at);
      for (const id of survivor.sentIds) {
        const at = survivor.times.get(id)?.[0] ?? Infinity;
        if ((firstAt.get(id) ?? Infinity) > at) firstAt.set(id, at);
      }
      for (let k = 0; k < 10; k++) {
        const key = `key-${k}`;
        const committed = await orderOf(b, key);
        const published = committed
          .filter((id) => firstAt.has(id))
          .sort((x, y) => (firstAt.get(x) ?? 0) - (firstAt.get(y) ?? 0));
        expect(published).toEqual(committed);
      }
    }, 180_000);

    // Fast takeover (ARCHITECTURE.md "Takeover after a crash"): leases of 60 s, no sweep; the
    // wait below is a third of the lease, so only the dead reader's freed owner lock explains it.
    it('gives the leases of a SIGKILLed reader back long before leaseMs: all delivered once more at most, per key in commit order', async () => {
      const consumer = new TcpConsumer();
      await consumer.start();
      scope.defer(() => consumer.stop().catch(() => undefined));
      const table = await tailedTable();
      const slow = { leaseMs: 60_000, publishTimeoutMs: 20_000 } as const;
      const doomed = await DispatcherChild.start(
        {
          db: target.name,
          table,
          instanceId: 'doomed-owner',
          tcpPort: consumer.port,
          dispatcher: { ...slow, claims: 'leases', batchSize: 20, listen: false },
          hangAfter: 25,
          logTailing: { sweepIntervalMs: NO_SWEEP, standbyRetryMs: 200 },
        },
        // A child compiles the library as it starts: slow on a loaded machine.
        120_000,
      );
      scope.defer(() => doomed.kill('SIGKILL').catch(() => undefined));
      await target.started(scope.ds, table);
      const survivor = new RecordingPublisher();
      const b = await tailingApp(table, survivor, {}, { instanceId: 'survivor', dispatcher: slow });
      const writer = await enqueuer(table);
      const ids: string[] = [];
      for (let tx = 0; tx < 12; tx++) {
        ids.push(
          ...(await writer.commit(Array.from({ length: 10 }, (_, k) => msg(`key-${k}`, { tx })))),
        );
      }
      const hanging = await doomed.waitFor('hanging', 30_000);
      const leasedToChild = (await b.rows())
        .filter((r) => r.lockedBy === 'doomed-owner' && r.status === 'pending')
        .map((r) => r.messageId);
      expect(leasedToChild.length).toBeGreaterThan(0);
      await doomed.kill('SIGKILL');
      await waitFor('every row delivered', delivered(b), { timeoutMs: 20_000 });

      const sentByChild = consumer.counts();
      const sentBySurvivor = survivor.sentIds;
      expect(ids.filter((id) => !sentByChild.has(id) && !sentBySurvivor.includes(id))).toEqual([]);
      // Published twice: only what the dead child sent and never settled.
      const unsettled = new Set(leasedToChild);
      const twice = sentBySurvivor.filter((id) => sentByChild.has(id));
      expect(twice.filter((id) => !unsettled.has(id))).toEqual([]);
      expect(new Set(sentBySurvivor).size).toBe(sentBySurvivor.length);
      const firsts = consumer.firstArrivalsByKey();
      for (let k = 0; k < 10; k++) {
        const key = `key-${k}`;
        const byChild = firsts.get(key) ?? [];
        const bySurvivor = survivor.sentForKey(key).filter((id) => !byChild.includes(id));
        expect([...byChild, ...bySurvivor]).toEqual(await orderOf(b, key));
      }
      expect(hanging.published.length).toBeGreaterThan(0);
    }, 240_000);

    it(`reports ${target.retained} and its reader as Prometheus gauges and in the Terminus health check`, async () => {
      const table = await tailedTable();
      const spec = dispatchTestApp(new RecordingPublisher());
      const h = await scope.open({
        ...spec,
        table,
        imports: [TerminusModule.forRoot({ logger: false })],
        providers: [OutboxHealthIndicator],
        options: mergeOutboxOptions(spec.options ?? {}, {
          autoStart: true,
          delivery: logTailing({ sweepIntervalMs: NO_SWEEP, ...target.logOptions() }),
        }),
      });
      await waitFor('reading', async () => (await h.dispatcher.logLagStatus())?.active === true);
      await target.started(scope.ds, table);
      const registry = new Registry();
      const metrics = new OutboxMetrics({ registry, sampleIntervalMs: 100 });
      metrics.startSampling(h.outbox, h.dispatcher);
      scope.defer(() => metrics.stopSampling());
      await waitFor('the gauges sampled', async () =>
        (await registry.metrics()).includes('outbox_log_reader_active 1'),
      );
      expect(await registry.metrics()).toMatch(/^outbox_log_retained_bytes \d+$/m);
      const health = h.moduleRef.get(OutboxHealthIndicator);
      const up = await health.isHealthy('outbox', { requireDispatcher: true });
      expect(up.outbox).toMatchObject({ status: 'up', log: { reading: true } });
      expect(typeof up.outbox.log?.retainedBytes).toBe('number');
    });

    it(`logTailingMigration() creates the ${target.logObject} in a TypeORM migration and drops it going down`, async () => {
      const table = await apps.untailedTable();
      const Migration = logTailingMigration({ tableName: table });
      const runner = scope.ds.createQueryRunner();
      try {
        await new Migration().up(runner);
        expect(await target.exists(scope.ds, table)).toBe(true);
        await new Migration().up(runner); // idempotent
        await new Migration().down(runner);
        expect(await target.exists(scope.ds, table)).toBe(false);
      } finally {
        await runner.release();
      }
    });

    it(`refuses to start without the ${target.logObject}, naming the command that creates it`, async () => {
      const table = await apps.untailedTable();
      await expect(tailingApp(table, new RecordingPublisher())).rejects.toThrow(
        expect.objectContaining({
          name: 'OutboxOptionsError',
          message: expect.stringContaining(target.setupCommand),
        }) as Error,
      );
    });

    it('leaves a transaction past maxTransactionInserts to the table: every message once, per key in order, one WARN', async () => {
      const table = await tailedTable();
      const publisher = new RecordingPublisher();
      const logs = new CapturingLogger();
      const spec = dispatchTestApp(publisher);
      // No sweep on a timer: only the reader's hand-off at the big transaction's commit wakes it.
      const h = await scope.open({
        ...spec,
        table,
        logger: logs,
        options: mergeOutboxOptions(spec.options ?? {}, {
          autoStart: true,
          delivery: logTailing({
            sweepIntervalMs: NO_SWEEP,
            standbyRetryMs: 200,
            maxTransactionInserts: 50,
            ...target.logOptions(),
          }),
        }),
      });
      await target.started(scope.ds, table);
      const keys = ['a', 'b', 'c', 'd'];
      const committed = [
        ...(await h.commit(keys.map((k) => msg(k, { tx: 'before' })))),
        ...(await h.commit(Array.from({ length: 200 }, (_, i) => msg(keys[i % 4] ?? null, { i })))),
        // After the big one: its messages of the same keys must not overtake the table's.
        ...(await h.commit(keys.map((k) => msg(k, { tx: 'after' })))),
      ];

      await waitFor('every message delivered', delivered(h), { timeoutMs: 30_000 });
      expect([...publisher.sentIds].sort()).toEqual([...committed].sort());
      expect(new Set(publisher.sentIds).size).toBe(committed.length);
      for (const key of keys) expect(publisher.sentForKey(key)).toEqual(await orderOf(h, key));
      expect((await h.rows()).every((r) => r.attempts === 1)).toBe(true);
      const warnings = logs.linesOf(/maxTransactionInserts/, 'warn');
      expect(warnings).toHaveLength(1);
      expect(warnings[0]?.message).toContain('passed 50 outbox inserts');
    });

    it('a delayed message that comes through the log goes out when due, not at the next sweep', async () => {
      const table = await tailedTable();
      const publisher = new RecordingPublisher();
      // The sweep's timer never fires in this test: only a sweep armed for the due time can.
      // Its log is printed if it does not deliver (it failed once under CI's load).
      const logs = new CapturingLogger();
      const h = await tailingApp(table, publisher, {}, {}, logs);
      await target.started(scope.ds, table);
      const [now] = await h.commit([msg('k', { now: true })]);
      await waitFor('the first message delivered', delivered(h));
      const [later] = await h.commit([{ ...msg('k', { later: true }), delayMs: 1_000 }]);
      await waitFor('the delayed message delivered', delivered(h), {
        timeoutMs: 20_000,
        describeState: () => `its log: ${linesOf(logs)}`,
      });
      expect(publisher.sentIds).toEqual([now, later]);
    });

    if (target === postgresTarget) postgresOnly(scope, apps);
    else mysqlOnly(scope, apps);
  });
}

/** What only PostgreSQL has: the slot and publication, as the CLI shows and drops them. */
function postgresOnly(
  scope: OutboxScope,
  { tailingApp, untailedTable, tailedTable }: TailingApps,
): void {
  // Issue 75, item 16: a lease by id that the server cancels for its statement timeout was taken
  // for an outage, and log tailing paused again and again under a load the server still served.
  // Here each leased row costs the server 20 ms (a trigger on the lease's update): a lease of 200
  // ids runs 4 s, past the 1 s statement timeout; one of 25 passes.
  it('a lease by id past the statement timeout on a busy server is load, not an outage: smaller leases deliver everything, once, in order, with one WARN', async () => {
    const table = await tailedTable();
    const slow = `${table}_slow_lease`;
    await scope.ds.query(
      `CREATE FUNCTION "${slow}"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF OLD.locked_by IS NULL AND NEW.locked_by IS NOT NULL THEN PERFORM pg_sleep(0.02); END IF; RETURN NEW; END $$`,
    );
    scope.defer(() => scope.ds.query(`DROP FUNCTION IF EXISTS "${slow}"() CASCADE`));
    await scope.ds.query(
      `CREATE TRIGGER "${slow}" BEFORE UPDATE ON "${table}" FOR EACH ROW EXECUTE FUNCTION "${slow}"()`,
    );
    const publisher = new RecordingPublisher();
    const logs = new CapturingLogger();
    const h = await tailingApp(
      table,
      publisher,
      {},
      { dispatcher: { batchSize: 200, dbTimeoutMs: 1_000 } },
      logs,
    );
    await waitFor('reading', async () => (await h.dispatcher.logLagStatus())?.active === true);
    const keys = ['a', 'b', 'c', 'd'];
    const committed = await h.commit(
      Array.from({ length: 200 }, (_, i) => msg(keys[i % 4] ?? null, { i })),
    );

    await waitFor('every message delivered', delivered(h), { timeoutMs: 60_000 });
    expect([...publisher.sentIds].sort()).toEqual([...committed].sort());
    expect(new Set(publisher.sentIds).size).toBe(committed.length);
    for (const key of keys) expect(publisher.sentForKey(key)).toEqual(await orderOf(h, key));
    expect((await h.rows()).every((r) => r.attempts === 1)).toBe(true);
    const warnings = logs.linesOf(/statement timeout/, 'warn');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.message).toMatch(/the server is busy, not gone/);
    expect(logs.linesOf(/[Oo]utage|pausing/)).toEqual([]);
  }, 90_000);

  it('outbox schema migrate --log-tailing makes the publication; log status shows the slot; log drop --yes removes it', async () => {
    const table = await untailedTable();
    const names = postgresNames(table);
    const migrated = await cli('postgres', [
      'schema',
      'migrate',
      '--log-tailing',
      '--table',
      table,
    ]);
    expect(migrated.code).toBe(0);
    expect(migrated.out).toContain(`Publication ${names.publication}`);
    const app = await tailingApp(table, new RecordingPublisher());
    await waitFor('reading', async () => (await app.dispatcher.logLagStatus())?.active === true);
    const status = await cli('postgres', ['log', 'status', '--table', table, '--json']);
    const running = JSON.parse(status.out) as {
      active: boolean;
      slotExists: boolean;
      publicationCoversTable: boolean;
      retainedBytes: number;
    };
    expect(running).toMatchObject({ active: true, slotExists: true, publicationCoversTable: true });
    expect(typeof running.retainedBytes).toBe('number');
    // A running reader's slot is not dropped.
    await dropRefusedUntilLetGo('postgres', table, app);
    expect((await cli('postgres', ['log', 'drop', '--yes', '--table', table])).code).toBe(0);
    const gone: unknown[] = await scope.ds.query(
      'SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 UNION ALL SELECT 1 FROM pg_publication WHERE pubname = $1',
      [names.slot],
    );
    expect(gone).toEqual([]);
  });
}

/** What only MySQL/MariaDB has: the position table in the CLI, and PostgreSQL's options refused. */
function mysqlOnly(scope: OutboxScope, { tailingApp, tailedTable, untailedTable }: TailingApps) {
  it('outbox schema migrate --log-tailing makes the position table; log status shows the position, the reader and the lag; log drop --yes removes it', async () => {
    const table = await untailedTable();
    const migrated = await cli('mariadb', ['schema', 'migrate', '--log-tailing', '--table', table]);
    expect(migrated.code).toBe(0);
    expect(migrated.out).toContain(`${table}_log_position`);
    const idle = await cli('mariadb', ['log', 'status', '--table', table, '--json']);
    const before = JSON.parse(idle.out) as {
      positionTableExists: boolean;
      position: string | null;
      active: boolean;
    };
    expect(before).toMatchObject({ positionTableExists: true, position: null, active: false });
    // This app is given its binlog login as a URL rather than read from its DataSource.
    const publisher = new RecordingPublisher();
    const app = await tailingApp(table, publisher, { connectionString: serverUrl('mariadb') });
    await mariadbTarget.started(scope.ds, table);
    const [id] = await app.commit([msg('k', { via: 'url' })]);
    await waitFor('delivered from the binlog', () => publisher.sentIds.includes(id as string));
    const status = await cli('mariadb', ['log', 'status', '--table', table, '--json']);
    const running = JSON.parse(status.out) as {
      active: boolean;
      position: string | null;
      retainedBytes: number | null;
    };
    expect(running.active).toBe(true);
    expect(running.position).toMatch(/^.+\.\d+:\d+$/);
    expect(typeof running.retainedBytes).toBe('number');
    expect((await cli('mariadb', ['log', 'status', '--table', table])).out).toContain('read now');
    // A running reader's position table is not dropped.
    await dropRefusedUntilLetGo('mariadb', table, app);
    const withSlot = await cli('mariadb', ['log', 'status', '--slot', 'x', '--table', table]);
    expect(withSlot.code).toBe(2);
    expect(withSlot.err).toContain('--slot is for PostgreSQL');
    expect((await cli('mariadb', ['log', 'drop', '--yes', '--table', table])).code).toBe(0);
    expect(await mariadbTarget.exists(scope.ds, table)).toBe(false);
  });

  it("refuses PostgreSQL's slotName and publicationName, and a connectionString that is not a MySQL URL, without showing it", async () => {
    const table = await tailedTable();
    for (const [log, option] of [
      [{ slotName: 'outbox_slot' }, 'slotName'],
      [{ publicationName: 'outbox_pub' }, 'publicationName'],
    ] as const) {
      await expect(tailingApp(table, new RecordingPublisher(), log)).rejects.toThrow(
        expect.objectContaining({
          name: 'OutboxOptionsError',
          message: expect.stringContaining(`logTailing({ ${option} }) is for PostgreSQL`),
        }) as Error,
      );
    }
    const attempt = tailingApp(table, new RecordingPublisher(), {
      connectionString: 'postgres://replicator:s3cret@db/app',
    });
    await expect(attempt).rejects.toThrow(OutboxOptionsError);
    await expect(attempt).rejects.toThrow(/not a MySQL URL/);
    await expect(attempt).rejects.not.toThrow(/s3cret/);
  });
}

const sqlite = TEST_DATABASES.find((db) => db.name === 'sqlite');
if (sqlite !== undefined) {
  describeWith([], 'log tailing on SQLite', () => {
    const scope = useOutboxScope(sqlite, { tablePrefix: 'lt_sq' });

    it('refuses the log observer at bootstrap, saying to poll', async () => {
      const attempt = scope.open({
        ...dispatchTestApp(new RecordingPublisher()),
        options: { autoStart: true, delivery: logTailing() },
      });
      await expect(attempt).rejects.toThrow(OutboxOptionsError);
      await expect(attempt).rejects.toThrow(/SQLite.*'poll'/);
    });
  });
}

type TailingApps = ReturnType<typeof tailingApps>;

/** The tables and apps of one database's suite. */
function tailingApps(scope: OutboxScope, target: LogTarget) {
  // Every table whose log objects a test may have made: dropped again after the block.
  const made = new Set<string>();
  scope.defer(async () => {
    for (const table of made) await target.drop(scope.ds, table);
  }, 'block');

  /** A fresh table without log objects; whatever a test makes for it is dropped after it. */
  async function untailedTable(): Promise<string> {
    const table = await scope.table(target.prefix);
    made.add(table);
    // Deferred now, so it runs after the apps opened later are closed (last opened, first closed).
    scope.defer(() => target.drop(scope.ds, table));
    return table;
  }

  /** A fresh table with its log objects (publication / position table), dropped after the test. */
  async function tailedTable(): Promise<string> {
    const table = await untailedTable();
    await target.setUp(scope.ds, table);
    return table;
  }

  /** An app observing the log of `table`, started (autoStart) with the dispatch suites' defaults. */
  function tailingApp(
    table: string,
    publisher: RecordingPublisher,
    log: LogTailingOptions = {},
    overrides: HarnessOverrides = {},
    logger?: LoggerService,
  ): Promise<OutboxApp<RecordingPublisher>> {
    const spec = dispatchTestApp(publisher, overrides);
    return scope.open({
      ...spec,
      ...(logger === undefined ? {} : { logger }),
      table,
      options: mergeOutboxOptions(spec.options ?? {}, {
        autoStart: overrides.autoStart ?? true,
        delivery: logTailing({
          sweepIntervalMs: NO_SWEEP,
          standbyRetryMs: 200,
          ...target.logOptions(),
          ...log,
        }),
      }),
    });
  }

  /** Enqueues on `table` from an enqueue-only app, one transaction per call. */
  function enqueuer(table: string): Promise<OutboxApp> {
    return scope.open({ table, logger: ['error', 'fatal'] });
  }

  return { untailedTable, tailedTable, tailingApp, enqueuer };
}

const delivered = (h: OutboxApp) => async (): Promise<boolean> =>
  (await h.rows()).every((r) => r.status === 'delivered');

/** The ids of `key`'s rows in commit (id) order. */
async function orderOf(h: OutboxApp, key: string): Promise<string[]> {
  return (await h.rows())
    .filter((r) => r.key === key)
    .sort((x, y) => Number(x.id) - Number(y.id))
    .map((r) => r.messageId);
}

/** Records when each message was handed to the broker. */
class TimedPublisher extends RecordingPublisher {
  readonly times = new Map<string, number[]>();

  override publish(messages: readonly OutboxRecord[], signal: AbortSignal) {
    for (const m of messages)
      this.times.set(m.messageId, [...(this.times.get(m.messageId) ?? []), Date.now()]);
    return super.publish(messages, signal);
  }
}

/** The test server as a `postgres://` or `mysql://` URL. */
function serverUrl(name: 'postgres' | 'mariadb'): string {
  const server = serverConnection(name);
  const user = encodeURIComponent(server.username);
  const password = server.password ?? '';
  const auth = password === '' ? user : `${user}:${encodeURIComponent(password)}`;
  const scheme = name === 'postgres' ? 'postgres' : 'mysql';
  return `${scheme}://${auth}@${server.host}:${server.port}/${server.database}`;
}

/**
 * `outbox log drop --yes` refuses while `app` reads the log of `table`; once it is closed and
 * its reader has let go, `log drop` without `--yes` still refuses, asking for it.
 */
async function dropRefusedUntilLetGo(
  name: 'postgres' | 'mariadb',
  table: string,
  app: OutboxApp,
): Promise<void> {
  const busy = await cli(name, ['log', 'drop', '--yes', '--table', table]);
  expect(busy.code).toBe(1);
  expect(busy.out).toContain('running app');
  await app.close();
  await waitFor('the reader let go', async () => {
    const later = await cli(name, ['log', 'status', '--table', table]);
    return later.out.includes('NOT read by any process');
  });
  const refused = await cli(name, ['log', 'drop', '--table', table]);
  expect(refused.code).toBe(2);
  expect(refused.err).toContain('--yes');
}

/** Runs the `outbox` command in this process against the test server. */
async function cli(
  name: 'postgres' | 'mariadb',
  argv: readonly string[],
): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runOutboxCli(
    argv,
    { DATABASE_URL: serverUrl(name) },
    { stdout: (t) => (out += t), stderr: (t) => (err += t) },
  );
  return { code, out, err };
}

/** A captured log as one line, for a test's failure message. */
function linesOf(logger: CapturingLogger): string {
  return logger.lines.map((l) => `${l.level} ${l.message}`).join(' | ');
}
