import type { DataSource } from 'typeorm';
import { OutboxOptionsError, type OutboxRecord } from '../../lib';
import { outboxTableNames } from '../../lib/internal/sql-identifier';
import {
  logTailing,
  logTailingMigration,
  postgresLogNames,
  postgresLogTailingDdl,
  type LogTailingOptions,
} from 'nestjs-outbox/log-tailing';
import { readAttempts, testDatabase } from '../support/databases';
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
import { describeWith, SERVICES } from '../support/services';
import { runOutboxCli } from '../../lib/operations/cli/outbox-cli';
import { TerminusModule } from '@nestjs/terminus';
import { Registry } from 'prom-client';
import { OutboxHealthIndicator } from 'nestjs-outbox/terminus';
import { OutboxMetrics } from 'nestjs-outbox/prometheus';
import { expectNever, waitFor } from '../support/wait-for';

// Log tailing on PostgreSQL (docs/log-tailing.md): the dispatcher learns of new messages from
// logical replication and leases them by id; the table stays the record. Each promise of the
// polling dispatcher is checked here with the log as the source of new messages: the table's
// own poll (the sweep) is set to an hour where a test proves what the log path did, so that
// the poll cannot have done it instead, and short where retries must come back through the
// table. Every slot a test makes is dropped after it (an unread slot keeps WAL forever).

const postgres = testDatabase('postgres');
/** The test database, part of a slot's default name. */
const DATABASE = process.env.PGDATABASE ?? 'test';

/** A dispatcher that only the log can have fed (the sweep does not run during the test). */
const NO_SWEEP = 3_600_000;

describeWith(['postgres'], 'log tailing on PostgreSQL', () => {
  const scope = useOutboxScope(postgres, { tablePrefix: 'lt_pg' });

  /** A fresh table with its publication; the slot and publication are dropped after the test. */
  async function tailedTable(): Promise<string> {
    const table = await scope.table('lt_pg');
    const ds = scope.ds;
    const names = postgresLogNames('public', table, DATABASE);
    for (const statement of postgresLogTailingDdl(
      outboxTableNames(table, null, 'double'),
      names.publication,
    )) {
      await ds.query(statement);
    }
    // Deferred now, so it runs after the apps opened later are closed (last opened, first closed).
    scope.defer(() => dropLogObjects(ds, names.slot, names.publication));
    return table;
  }

  /** An app observing the log on `table`, started (autoStart) with the dispatch suites' defaults. */
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
          observe: logTailing({ sweepIntervalMs: NO_SWEEP, standbyRetryMs: 200, ...log }),
        },
      }),
    });
  }

  /** Enqueues on `table` from an enqueue-only app, one transaction per call. */
  async function enqueuer(table: string): Promise<OutboxApp> {
    return scope.open({ table, logger: ['error', 'fatal'] });
  }

  const delivered = (h: OutboxApp) => async (): Promise<boolean> =>
    (await h.rows()).every((r) => r.status === 'delivered');

  it('publishes every committed message once, per key in commit order, and never a rolled-back one', async () => {
    const table = await tailedTable();
    const publisher = new RecordingPublisher();
    const h = await tailingApp(table, publisher);
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

  it("under 'block' a dead head holds its key; under 'skip' the key moves on", async () => {
    for (const onDeadLetter of ['block', 'skip'] as const) {
      const table = await tailedTable();
      const publisher = new RecordingPublisher();
      const h = await tailingApp(
        table,
        publisher,
        { sweepIntervalMs: 100 },
        { ordering: { onDeadLetter } },
      );
      const [a1] = await h.commit([msg('a', { n: 1 })]);
      publisher.fail(a1 as string, 'permanent');
      const [a2] = await h.commit([msg('a', { n: 2 })]);
      const [c1] = await h.commit([msg('c', { n: 1 })]);
      await waitFor('c delivered', () => publisher.sentIds.includes(c1 as string));
      await waitFor('a1 dead', async () => (await h.row(a1 as string)).status === 'dead');
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
    const [bad] = await h.commit([msg(null, { bad: true })]);
    publisher.fail(bad as string, 'retryable');
    const [good] = await h.commit([msg(null, { good: true })]);
    await waitFor(
      'the failing message dead',
      async () => (await h.row(bad as string)).status === 'dead',
      {
        timeoutMs: 15_000,
      },
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

  it('pauses through a broker outage without spending attempts, then delivers everything', async () => {
    const table = await tailedTable();
    const publisher = new RecordingPublisher();
    const h = await tailingApp(
      table,
      publisher,
      { sweepIntervalMs: 200 },
      { dispatcher: { maxOutagePauseMs: 500 } },
    );
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
    const a = await tailingApp(
      table,
      first,
      {},
      { dispatcher: { batchSize: 5, shutdownTimeoutMs: 100 } },
    );
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
    // Committed while no process reads the slot: the slot keeps it.
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
      const ofKey = (await b.rows())
        .filter((r) => r.key === key)
        .sort((x, y) => Number(x.id) - Number(y.id))
        .map((r) => r.messageId);
      expect([...first.sentForKey(key), ...second.sentForKey(key)]).toEqual(ofKey);
    }
  });

  it('a standby takes over within seconds when the reading instance stops during a drain', async () => {
    const table = await tailedTable();
    const publisherA = new RecordingPublisher().slow(40);
    const publisherB = new RecordingPublisher().slow(40);
    const overrides = { dispatcher: { batchSize: 10, shutdownTimeoutMs: 2_000 } };
    const a = await tailingApp(table, publisherA, {}, { ...overrides, instanceId: 'tailer-a' });
    await waitFor('a reading', async () => (await a.dispatcher.logLagStatus())?.active === true);
    const b = await tailingApp(table, publisherB, {}, { ...overrides, instanceId: 'tailer-b' });
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
    const rows = await b.rows();
    for (let k = 0; k < 5; k++) {
      const ofKey = rows
        .filter((r) => r.key === `k${k}`)
        .sort((x, y) => Number(x.id) - Number(y.id))
        .map((r) => r.messageId);
      expect([...publisherA.sentForKey(`k${k}`), ...publisherB.sentForKey(`k${k}`)]).toEqual(ofKey);
    }
  });

  it('a standby takes over within seconds when the reading process is SIGKILLed mid-batch; nothing is lost, per-key order holds', async () => {
    const consumer = new TcpConsumer();
    await consumer.start();
    scope.defer(() => consumer.stop().catch(() => undefined));
    const table = await tailedTable();
    const doomed = await DispatcherChild.start({
      db: 'postgres',
      table,
      instanceId: 'doomed-tailer',
      tcpPort: consumer.port,
      dispatcher: { leaseMs: 3_000, publishTimeoutMs: 2_800, batchSize: 20, listen: false },
      hangAfter: 25,
      logTailing: { sweepIntervalMs: NO_SWEEP, standbyRetryMs: 200 },
    });
    scope.defer(() => doomed.kill('SIGKILL').catch(() => undefined));
    // The standby, in this process: it waits for the slot while the child reads it.
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
    // (Its sweep of the table may already publish what the child has not leased: both paths
    // lease heads of key under row locks, so that is no duplicate and keeps the order.)
    // The child's batch in flight: leased to it, published in part (in rounds), never settled.
    const leasedToChild: { id: string }[] = await scope.ds.query(
      `SELECT message_id::text AS id FROM "${table}" WHERE locked_by = 'doomed-tailer' AND status = 'pending'`,
    );
    await doomed.kill('SIGKILL');
    const killedAt = Date.now();
    await waitFor(
      'the standby reading',
      async () => (await b.dispatcher.logLagStatus())?.active === true,
      {
        timeoutMs: 10_000,
        intervalMs: 50,
      },
    );
    const takeoverMs = Date.now() - killedAt;
    await waitFor('every row delivered', delivered(b), { timeoutMs: 30_000 });
    expect(takeoverMs).toBeLessThan(5_000);

    const sentByChild = consumer.counts();
    const sentBySurvivor = survivor.sentIds;
    // Nothing lost; the only messages published twice are the ones the child sent and never settled.
    expect(ids.filter((id) => !sentByChild.has(id) && !sentBySurvivor.includes(id))).toEqual([]);
    const unsettled = new Set(leasedToChild.map((r) => r.id));
    const twice = sentBySurvivor.filter((id) => sentByChild.has(id));
    expect(twice.filter((id) => !unsettled.has(id))).toEqual([]);
    expect(hanging.published.filter((id) => !twice.includes(id))).toEqual([]);
    expect(new Set(sentBySurvivor).size).toBe(sentBySurvivor.length);
    // Per key, first publications in commit order: the child's, then the survivor's new ones.
    const rows = await b.rows();
    const firsts = consumer.firstArrivalsByKey();
    for (let k = 0; k < 10; k++) {
      const key = `key-${k}`;
      const order = rows
        .filter((r) => r.key === key)
        .sort((x, y) => Number(x.id) - Number(y.id))
        .map((r) => r.messageId);
      const byChild = firsts.get(key) ?? [];
      const bySurvivor = survivor.sentForKey(key).filter((id) => !byChild.includes(id));
      expect([...byChild, ...bySurvivor]).toEqual(order);
    }
  });

  it('outbox schema migrate --log-tailing makes the publication; log status shows the slot; log drop --yes removes it', async () => {
    const table = await scope.table('lt_pg');
    const names = postgresLogNames('public', table, DATABASE);
    scope.defer(() => dropLogObjects(scope.ds, names.slot, names.publication));
    const migrated = await cli(['schema', 'migrate', '--log-tailing', '--table', table]);
    expect(migrated.code).toBe(0);
    expect(migrated.out).toContain(`Publication ${names.publication}`);
    const app = await tailingApp(table, new RecordingPublisher());
    await waitFor('reading', async () => (await app.dispatcher.logLagStatus())?.active === true);
    const running = JSON.parse((await cli(['log', 'status', '--table', table, '--json'])).out) as {
      active: boolean;
      slotExists: boolean;
      publicationCoversTable: boolean;
      retainedBytes: number;
    };
    expect(running).toMatchObject({ active: true, slotExists: true, publicationCoversTable: true });
    expect(typeof running.retainedBytes).toBe('number');
    // A running reader's slot is not dropped.
    expect((await cli(['log', 'drop', '--yes', '--table', table])).code).toBe(1);
    await app.close();
    await waitFor('the slot let go', async () => {
      const status = await cli(['log', 'status', '--table', table]);
      return status.out.includes('NOT read by any process');
    });
    const refused = await cli(['log', 'drop', '--table', table]);
    expect(refused.code).toBe(2);
    expect(refused.err).toContain('--yes');
    expect((await cli(['log', 'drop', '--yes', '--table', table])).code).toBe(0);
    const gone: unknown[] = await scope.ds.query(
      'SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 UNION ALL SELECT 1 FROM pg_publication WHERE pubname = $1',
      [names.slot],
    );
    expect(gone).toEqual([]);
  });

  it("reports the slot's retained WAL and its reader as Prometheus gauges and in the Terminus health check", async () => {
    const table = await tailedTable();
    const spec = dispatchTestApp(new RecordingPublisher());
    const h = await scope.open({
      ...spec,
      table,
      imports: [TerminusModule.forRoot({ logger: false })],
      providers: [OutboxHealthIndicator],
      options: mergeOutboxOptions(spec.options ?? {}, {
        autoStart: true,
        dispatcher: { observe: logTailing({ sweepIntervalMs: NO_SWEEP }) },
      }),
    });
    await waitFor('reading', async () => (await h.dispatcher.logLagStatus())?.active === true);
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

  it('logTailingMigration() creates the publication in a TypeORM migration and drops it going down', async () => {
    const table = await scope.table('lt_pg');
    const names = postgresLogNames('public', table, DATABASE);
    scope.defer(() => dropLogObjects(scope.ds, names.slot, names.publication));
    const Migration = logTailingMigration({ tableName: table });
    const runner = scope.ds.createQueryRunner();
    const covered = async (): Promise<boolean> => {
      const rows: unknown[] = await scope.ds.query(
        'SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND tablename = $2',
        [names.publication, table],
      );
      return rows.length === 1;
    };
    try {
      await new Migration().up(runner);
      expect(await covered()).toBe(true);
      await new Migration().up(runner); // idempotent
      await new Migration().down(runner);
      expect(await covered()).toBe(false);
    } finally {
      await runner.release();
    }
  });

  it('refuses to start without the publication, naming the command that creates it', async () => {
    const table = await scope.table('lt_pg');
    const names = postgresLogNames('public', table, DATABASE);
    scope.defer(() => dropLogObjects(scope.ds, names.slot, names.publication));
    await expect(tailingApp(table, new RecordingPublisher())).rejects.toThrow(
      expect.objectContaining({
        name: 'OutboxOptionsError',
        message: expect.stringContaining('outbox schema migrate'),
      }) as Error,
    );
  });
});

describeWith([], 'log tailing on SQLite', () => {
  const scope = useOutboxScope(testDatabase('sqlite'), { tablePrefix: 'lt_sq' });

  it('refuses the log observer at bootstrap, saying to poll', async () => {
    const attempt = scope.open({
      ...dispatchTestApp(new RecordingPublisher()),
      options: { autoStart: true, dispatcher: { observe: logTailing() } },
    });
    await expect(attempt).rejects.toThrow(OutboxOptionsError);
    await expect(attempt).rejects.toThrow(/SQLite.*'poll'/);
  });
});

/** Records when each message was handed to the broker. */
class TimedPublisher extends RecordingPublisher {
  readonly times = new Map<string, number[]>();

  override publish(messages: readonly OutboxRecord[], signal: AbortSignal) {
    for (const m of messages)
      this.times.set(m.messageId, [...(this.times.get(m.messageId) ?? []), Date.now()]);
    return super.publish(messages, signal);
  }
}

/** Runs the `outbox` command in this process against the test server. */
async function cli(argv: readonly string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const user = encodeURIComponent(process.env.PGUSER ?? 'postgres');
  const pw = process.env.PGPASSWORD;
  const auth = pw === undefined ? user : `${user}:${encodeURIComponent(pw)}`;
  const url = `postgres://${auth}@${SERVICES.postgres.host}:${SERVICES.postgres.port}/${process.env.PGDATABASE ?? 'test'}`;
  const code = await runOutboxCli(
    argv,
    { DATABASE_URL: url },
    { stdout: (t) => (out += t), stderr: (t) => (err += t) },
  );
  return { code, out, err };
}

async function dropLogObjects(ds: DataSource, slot: string, publication: string): Promise<void> {
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
}
