import type { DataSource } from 'typeorm';
import { OutboxOptionsError } from '../../lib';
import { outboxTableNames } from '../../lib/internal/sql-identifier';
import {
  logTailing,
  logTailingMigration,
  mysqlLogTailingDdl,
  mysqlLogTailingDrop,
  type BinlogClientClass,
  type LogTailingOptions,
} from 'nestjs-outbox/log-tailing';
import { readAttempts, serverConnection, testDatabase } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import {
  dispatchTestApp,
  mergeOutboxOptions,
  type HarnessOverrides,
  type OutboxApp,
} from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { DispatcherChild } from '../support/children/spawn-dispatcher';
import { TcpConsumer } from '../support/children/tcp-consumer';
import { describeWithPackages } from '../support/services';
import { TerminusModule } from '@nestjs/terminus';
import { Registry } from 'prom-client';
import { OutboxHealthIndicator } from 'nestjs-outbox/terminus';
import { OutboxMetrics } from 'nestjs-outbox/prometheus';
import { runOutboxCli } from '../../lib/operations/cli/outbox-cli';
import { expectNever, waitFor } from '../support/wait-for';

// Log tailing on MySQL/MariaDB (docs/log-tailing.md#mysql-and-mariadb), through the real
// OutboxModule: the dispatcher learns of new messages from the binlog and leases them by id; the
// table stays the record. Modelled on postgres-log-tailing.spec.ts: the table's own poll (the
// sweep) is set to an hour where a test proves what the log path did, and short where retries
// must come back through the table. Each test's position table is dropped after it.

// zongji is an ES module: jest's module system cannot load it, so the test asks Node's own
// require for it and hands the class over, as `binlogClient` documents for such runners.
const ZongJi = (
  process.getBuiltinModule('node:module').createRequire(__filename)('@vlasky/zongji') as {
    default: BinlogClientClass;
  }
).default;

const mariadb = testDatabase('mariadb');
const server = serverConnection('mariadb');

/** A dispatcher that only the log can have fed (the sweep does not run during the test). */
const NO_SWEEP = 3_600_000;

describeWithPackages(['mariadb'], ['@vlasky/zongji'], 'log tailing on MySQL/MariaDB', () => {
  const scope = useOutboxScope(mariadb, { tablePrefix: 'lt_my2' });

  const namesOf = (table: string) => outboxTableNames(table, null, 'backtick');

  /** A fresh table with its position table (as `outbox log setup` makes it), both dropped after. */
  async function tailedTable(): Promise<string> {
    const table = await scope.table('lt_my2');
    const ds = scope.ds;
    for (const statement of mysqlLogTailingDdl(namesOf(table))) await ds.query(statement);
    // Deferred now, so it runs after the apps opened later are closed (last opened, first closed).
    scope.defer(() => dropPositionTable(ds, table));
    return table;
  }

  /** An app observing the binlog of `table`, started (autoStart) with the dispatch suites' defaults. */
  function tailingApp(
    table: string,
    publisher: RecordingPublisher,
    log: LogTailingOptions = {},
    overrides: HarnessOverrides = {},
  ): Promise<OutboxApp<RecordingPublisher>> {
    const spec = dispatchTestApp(publisher, overrides);
    return scope.open({
      ...spec,
      table,
      options: mergeOutboxOptions(spec.options ?? {}, {
        autoStart: true,
        dispatcher: {
          observe: logTailing({
            sweepIntervalMs: NO_SWEEP,
            standbyRetryMs: 200,
            binlogClient: ZongJi,
            ...log,
          }),
        },
      }),
    });
  }

  /**
   * The first reader of a table starts at the binlog's end and stores that position: what is
   * committed before is left to the poll. Tests that commit right away wait for it.
   */
  async function positionStored(table: string): Promise<void> {
    await waitFor('the reader stored its first position', async () => {
      const rows: unknown[] = await scope.ds.query(
        `SELECT 1 FROM \`${table}_log_position\` WHERE id = 1`,
      );
      return rows.length === 1;
    });
  }

  /** Enqueues on `table` from an enqueue-only app, one transaction per call. */
  async function enqueuer(table: string): Promise<OutboxApp> {
    return scope.open({ table, logger: ['error', 'fatal'] });
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

  it('publishes every committed message once, per key in commit order, and never a rolled-back one', async () => {
    const table = await tailedTable();
    const publisher = new RecordingPublisher();
    const h = await tailingApp(table, publisher);
    await positionStored(table);
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

  it("under 'block', a failing head holds its key in the table; later messages follow it in order, other keys flow", async () => {
    const table = await tailedTable();
    const publisher = new RecordingPublisher();
    // Retries come back through the table, swept when the first is due (no periodic sweep here).
    const h = await tailingApp(table, publisher);
    await positionStored(table);
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

  it("under 'block' a dead head holds its key and dead-letters are recorded; under 'skip' the key moves on", async () => {
    for (const onDeadLetter of ['block', 'skip'] as const) {
      const table = await tailedTable();
      const publisher = new RecordingPublisher();
      const h = await tailingApp(
        table,
        publisher,
        { sweepIntervalMs: 100 },
        { ordering: { onDeadLetter }, retry: { maxAttempts: 2, initialDelayMs: 50, jitter: 0 } },
      );
      await positionStored(table);
      const [a1] = await h.commit([msg('a', { n: 1 })]);
      publisher.fail(a1 as string, 'retryable');
      const [a2] = await h.commit([msg('a', { n: 2 })]);
      const [c1] = await h.commit([msg('c', { n: 1 })]);
      await waitFor('c delivered', () => publisher.sentIds.includes(c1 as string));
      await waitFor('a1 dead', async () => (await h.row(a1 as string)).status === 'dead', {
        timeoutMs: 15_000,
      });
      const dead = await h.row(a1 as string);
      expect(dead.attempts).toBe(2);
      const history = (await readAttempts(scope.ds, table)).filter((r) => r.messageId === a1);
      expect(history.map((r) => r.outcome)).toEqual(['retry', 'dead']);
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
  });

  it('after a shutdown mid-batch, the next reader replays from the acknowledged position: nothing lost, nothing delivered twice', async () => {
    const table = await tailedTable();
    const first = new RecordingPublisher().slow(300);
    const a = await tailingApp(
      table,
      first,
      {},
      { dispatcher: { batchSize: 5, shutdownTimeoutMs: 100 } },
    );
    await positionStored(table);
    const early = await a.commit(Array.from({ length: 20 }, (_, i) => msg(`k${i % 4}`, { i })));
    // One batch of five through, the next one publishing: the transaction is not acknowledged.
    await waitFor('a first batch delivered', () => first.sentIds.length >= 5);
    await a.close();
    // A graceful shutdown: the batch cut short is released, its attempt given back, no lease left.
    const afterStop = await a.rows();
    expect(afterStop.filter((r) => r.lockedBy !== null)).toEqual([]);
    expect(afterStop.filter((r) => r.status === 'pending').every((r) => r.attempts === 0)).toBe(
      true,
    );
    // Committed while no process reads the binlog: the stored position is before it.
    const late = await a.commit(
      Array.from({ length: 10 }, (_, i) => msg(`k${i % 4}`, { late: i })),
    );
    const second = new RecordingPublisher();
    const b = await tailingApp(table, second, {}, { instanceId: 'second' });
    await waitFor('every message delivered', delivered(b), { timeoutMs: 20_000 });
    const all = [...early, ...late];
    const firstSent = new Set(first.sentIds);
    expect(firstSent.size).toBeGreaterThanOrEqual(5);
    expect(second.sentIds.filter((id) => firstSent.has(id))).toEqual([]);
    expect([...first.sentIds, ...second.sentIds].sort()).toEqual([...all].sort());
    for (let k = 0; k < 4; k++) {
      const key = `k${k}`;
      expect([...first.sentForKey(key), ...second.sentForKey(key)]).toEqual(await orderOf(b, key));
    }
  });

  it('a standby takes over within seconds when the reading instance stops during a drain', async () => {
    const table = await tailedTable();
    const publisherA = new RecordingPublisher().slow(40);
    const publisherB = new RecordingPublisher().slow(40);
    const overrides = { dispatcher: { batchSize: 10, shutdownTimeoutMs: 2_000 } };
    const a = await tailingApp(table, publisherA, {}, { ...overrides, instanceId: 'tailer-a' });
    await waitFor('a reading', async () => (await a.dispatcher.logLagStatus())?.active === true);
    await positionStored(table);
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
        await new Promise((resolve) => setTimeout(resolve, 20));
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

  it('pauses through a broker outage without spending attempts, then delivers everything', async () => {
    const table = await tailedTable();
    const publisher = new RecordingPublisher();
    const h = await tailingApp(
      table,
      publisher,
      { sweepIntervalMs: 200 },
      { dispatcher: { maxOutagePauseMs: 500 } },
    );
    await positionStored(table);
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

  it('a standby takes over within seconds when the reading process is SIGKILLed mid-batch; nothing is lost, per-key order holds', async () => {
    const consumer = new TcpConsumer();
    await consumer.start();
    scope.defer(() => consumer.stop().catch(() => undefined));
    const table = await tailedTable();
    // A plain Node process: it loads @vlasky/zongji itself (no binlogClient).
    const doomed = await DispatcherChild.start({
      db: 'mariadb',
      table,
      instanceId: 'doomed-tailer',
      tcpPort: consumer.port,
      dispatcher: { leaseMs: 3_000, publishTimeoutMs: 2_800, batchSize: 20, listen: false },
      hangAfter: 25,
      logTailing: { sweepIntervalMs: NO_SWEEP, standbyRetryMs: 200 },
    });
    scope.defer(() => doomed.kill('SIGKILL').catch(() => undefined));
    await positionStored(table);
    // The standby, in this process: it waits for the lock while the child reads the binlog.
    const survivor = new RecordingPublisher();
    const b = await tailingApp(
      table,
      survivor,
      { sweepIntervalMs: 200 },
      { instanceId: 'survivor', dispatcher: { leaseMs: 1_500 } },
    );
    const writer = await enqueuer(table);
    const ids: string[] = [];
    for (let tx = 0; tx < 12; tx++) {
      ids.push(
        ...(await writer.commit(Array.from({ length: 10 }, (_, k) => msg(`key-${k}`, { tx })))),
      );
    }
    const hanging = await doomed.waitFor('hanging', 20_000);
    expect((await b.dispatcher.logLagStatus())?.active).toBe(false);
    // The child's batch in flight: leased to it, published in part, never settled.
    const leasedToChild = (await b.rows())
      .filter((r) => r.lockedBy === 'doomed-tailer' && r.status === 'pending')
      .map((r) => r.messageId);
    await doomed.kill('SIGKILL');
    const killedAt = Date.now();
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
    // Per key, first publications in commit order: the child's, then the survivor's new ones.
    const firsts = consumer.firstArrivalsByKey();
    for (let k = 0; k < 10; k++) {
      const key = `key-${k}`;
      const byChild = firsts.get(key) ?? [];
      const bySurvivor = survivor.sentForKey(key).filter((id) => !byChild.includes(id));
      expect([...byChild, ...bySurvivor]).toEqual(await orderOf(b, key));
    }
  });

  it('reports the binlog after the stored position and its reader as Prometheus gauges and in the Terminus health check', async () => {
    const table = await tailedTable();
    const spec = dispatchTestApp(new RecordingPublisher());
    const h = await scope.open({
      ...spec,
      table,
      imports: [TerminusModule.forRoot({ logger: false })],
      providers: [OutboxHealthIndicator],
      options: mergeOutboxOptions(spec.options ?? {}, {
        autoStart: true,
        dispatcher: {
          observe: logTailing({ sweepIntervalMs: NO_SWEEP, binlogClient: ZongJi }),
        },
      }),
    });
    await waitFor('reading', async () => (await h.dispatcher.logLagStatus())?.active === true);
    await positionStored(table);
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

  it('outbox schema migrate --log-tailing makes the position table; log status shows the position, the reader and the lag; log drop --yes removes it', async () => {
    const table = await scope.table('lt_my2');
    scope.defer(() => dropPositionTable(scope.ds, table));
    const migrated = await cli(['schema', 'migrate', '--log-tailing', '--table', table]);
    expect(migrated.code).toBe(0);
    expect(migrated.out).toContain(`${table}_log_position`);
    const before = JSON.parse((await cli(['log', 'status', '--table', table, '--json'])).out) as {
      positionTableExists: boolean;
      position: string | null;
      active: boolean;
    };
    expect(before).toMatchObject({ positionTableExists: true, position: null, active: false });
    // This app is given its binlog login as a URL rather than read from its DataSource.
    const url = serverUrl();
    const publisher = new RecordingPublisher();
    const app = await tailingApp(table, publisher, { connectionString: url });
    await positionStored(table);
    const [id] = await app.commit([msg('k', { via: 'url' })]);
    await waitFor('delivered from the binlog', () => publisher.sentIds.includes(id as string));
    const running = JSON.parse((await cli(['log', 'status', '--table', table, '--json'])).out) as {
      active: boolean;
      position: string | null;
      retainedBytes: number | null;
    };
    expect(running.active).toBe(true);
    expect(running.position).toMatch(/^.+\.\d+:\d+$/);
    expect(typeof running.retainedBytes).toBe('number');
    expect((await cli(['log', 'status', '--table', table])).out).toContain('read now');
    // A running reader's position table is not dropped.
    const busy = await cli(['log', 'drop', '--yes', '--table', table]);
    expect(busy.code).toBe(1);
    expect(busy.out).toContain('running app');
    await app.close();
    await waitFor('the lock let go', async () => {
      const status = await cli(['log', 'status', '--table', table]);
      return status.out.includes('NOT read by any process');
    });
    const refused = await cli(['log', 'drop', '--table', table]);
    expect(refused.code).toBe(2);
    expect(refused.err).toContain('--yes');
    const withSlot = await cli(['log', 'status', '--slot', 'x', '--table', table]);
    expect(withSlot.code).toBe(2);
    expect(withSlot.err).toContain('--slot is for PostgreSQL');
    expect((await cli(['log', 'drop', '--yes', '--table', table])).code).toBe(0);
    expect(await positionTableExists(scope.ds, table)).toBe(false);
  });

  it('logTailingMigration() creates the position table in a TypeORM migration and drops it going down', async () => {
    const table = await scope.table('lt_my2');
    scope.defer(() => dropPositionTable(scope.ds, table));
    const Migration = logTailingMigration({ tableName: table });
    const runner = scope.ds.createQueryRunner();
    try {
      await new Migration().up(runner);
      expect(await positionTableExists(scope.ds, table)).toBe(true);
      await new Migration().up(runner); // idempotent
      await new Migration().down(runner);
      expect(await positionTableExists(scope.ds, table)).toBe(false);
    } finally {
      await runner.release();
    }
  });

  it('refuses to start without the position table, naming the command that creates it', async () => {
    const table = await scope.table('lt_my2');
    await expect(tailingApp(table, new RecordingPublisher())).rejects.toThrow(
      expect.objectContaining({
        name: 'OutboxOptionsError',
        message: expect.stringContaining('outbox log setup'),
      }) as Error,
    );
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
});

/** The test server as a `mysql://` URL. */
function serverUrl(): string {
  const user = encodeURIComponent(server.username);
  const password = server.password ?? '';
  const auth = password === '' ? user : `${user}:${encodeURIComponent(password)}`;
  return `mysql://${auth}@${server.host}:${server.port}/${server.database}`;
}

/** Runs the `outbox` command in this process against the test server. */
async function cli(argv: readonly string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runOutboxCli(
    argv,
    { DATABASE_URL: serverUrl() },
    { stdout: (t) => (out += t), stderr: (t) => (err += t) },
  );
  return { code, out, err };
}

async function positionTableExists(ds: DataSource, table: string): Promise<boolean> {
  const rows: unknown[] = await ds.query(
    'SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?',
    [`${table}_log_position`],
  );
  return rows.length === 1;
}

async function dropPositionTable(ds: DataSource, table: string): Promise<void> {
  for (const statement of mysqlLogTailingDrop(outboxTableNames(table, null, 'backtick'))) {
    await ds.query(statement);
  }
}
