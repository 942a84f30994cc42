import { TerminusModule } from '@nestjs/terminus';
import { Registry } from 'prom-client';
import { OutboxReplicationSlotWaitError } from '../../lib/log-tailing';
import { runOutboxCli } from '../../lib/operations/cli/outbox-cli';
import { logTailing, type LogTailingOptions } from 'nestjs-outbox/log-tailing';
import { OutboxMetrics } from 'nestjs-outbox/prometheus';
import { OutboxHealthIndicator } from 'nestjs-outbox/terminus';
import { CapturingLogger } from '../support/capturing-logger';
import { serverConnection, testDatabase } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import {
  dispatchTestApp,
  dropOutboxTable,
  mergeOutboxOptions,
  type HarnessOverrides,
  type OutboxApp,
} from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { ensureOutboxTable } from '../../lib/typeorm/typeorm-tables';
import { testPartitioning } from '../support/partitioned-tables';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { postgresLogTables, postgresServerUrl } from '../support/postgres-log-tables';
import { FaultProxy } from '../../lib/testing';
import { resolvesWithin, waitFor } from '../support/wait-for';

// The PostgreSQL log reader under faults: stopped in every state, cut off silently, its slot
// dropped under it, its first slot held up by an open transaction, its publication emptied by a
// table made again. Through the real module, with the reader's replication connection behind a
// TCP proxy where a test cuts it. docs/log-tailing.md.

/** A dispatcher that only the log can have fed (the table's sweep does not run in the test). */
const NO_SWEEP = 3_600_000;
const server = serverConnection('postgres');

/** Runs the `outbox` command in this process against the test server. */
async function cli(argv: readonly string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runOutboxCli(
    argv,
    { DATABASE_URL: postgresServerUrl() },
    { stdout: (t) => (out += t), stderr: (t) => (err += t) },
  );
  return { code, out, err };
}

describeWith(['postgres'], 'the PostgreSQL log reader under faults', () => {
  const scope = useOutboxScope(testDatabase('postgres'), { tablePrefix: 'lt_pgf' });
  const logTables = postgresLogTables(scope);
  const { names, slotRow } = logTables;
  const tailedTable = (bare = false): Promise<string> => logTables.tailedTable('lt_pgf', bare);

  /** A proxy in front of the server, closed after the test. */
  async function proxy(): Promise<FaultProxy> {
    const p = await FaultProxy.start(
      { host: server.host, port: server.port },
      { lifetimeMs: 120_000 },
    );
    scope.defer(() => p.close());
    return p;
  }

  /** An app reading the log of `table`, started, with a standby retry of 200 ms. */
  function tailingApp(
    table: string,
    publisher: RecordingPublisher,
    log: LogTailingOptions = {},
    overrides: HarnessOverrides & { logger?: CapturingLogger; health?: boolean } = {},
  ): Promise<OutboxApp<RecordingPublisher>> {
    const { logger, health, ...options } = overrides;
    const spec = dispatchTestApp(publisher, options);
    return scope.open({
      ...spec,
      table,
      ...(logger === undefined ? {} : { logger }),
      ...(health === true
        ? {
            imports: [TerminusModule.forRoot({ logger: false })],
            providers: [OutboxHealthIndicator],
          }
        : {}),
      options: mergeOutboxOptions(spec.options ?? {}, {
        autoStart: true,
        delivery: logTailing({ sweepIntervalMs: NO_SWEEP, standbyRetryMs: 200, ...log }),
      }),
    });
  }

  const reading = (h: OutboxApp) => async (): Promise<boolean> =>
    (await h.dispatcher.logLagStatus())?.active === true;

  it('closes at once when stopped while its replication connection is still connecting', async () => {
    const table = await tailedTable();
    const link = await proxy();
    // The server never answers: the reader stays connecting (its own connect bound is far off).
    link.cut('blackhole');
    const h = await tailingApp(table, new RecordingPublisher(), {
      connectionString: postgresServerUrl(link.port),
      readerTimeoutMs: 600_000,
    });
    await waitFor('the reader connecting', () => link.connections > 0);
    await resolvesWithin('the app closing', h.close(), 15_000);
    await waitFor("the reader's connection closed", () => link.connections === 0);
  });

  it('a reader cut off silently stops saying it reads; a standby takes the slot over and delivers; the cut app closes', async () => {
    const table = await tailedTable();
    const link = await proxy();
    const cutPublisher = new RecordingPublisher();
    const cutLogs = new CapturingLogger();
    const cut = await tailingApp(
      table,
      cutPublisher,
      { connectionString: postgresServerUrl(link.port), readerTimeoutMs: 2_000 },
      { instanceId: 'cut-reader', logger: cutLogs },
    );
    await waitFor('the reader reading', reading(cut));
    const registry = new Registry();
    const metrics = new OutboxMetrics({ registry, sampleIntervalMs: 100 });
    metrics.startSampling(cut.outbox, cut.dispatcher);
    scope.defer(() => metrics.stopSampling());
    await waitFor('the reader gauge at 1', async () =>
      (await registry.metrics()).includes('outbox_log_reader_active 1'),
    );
    const [before] = (await cut.commit([msg('k', { n: 1 })])) as [string];
    await waitFor('delivered by the reader', () => cutPublisher.sentIds.includes(before), {
      timeoutMs: 30_000,
      describeState: () =>
        `the reader warned: ${cutLogs.lines
          .filter((l) => l.level === 'warn' || l.level === 'error')
          .map((l) => l.message)
          .join(' | ')}`,
    });
    // The standby starts once the reader has delivered. Started before, under load (a busy loop
    // beside four runs of this test), it published the message committed after its start in 2
    // runs of 8, with no warning from the reader: a hand-over before the cut this test is about.
    // Nothing was lost or published twice; which path took it there is issue 77's to settle.
    const standbyPublisher = new RecordingPublisher();
    const standby = await tailingApp(
      table,
      standbyPublisher,
      { readerTimeoutMs: 2_000 },
      { instanceId: 'standby' },
    );
    expect(await reading(standby)()).toBe(false);

    // Nothing passes either way, and no connection is closed: no error reaches the reader.
    link.cut('blackhole');
    // Failure deadlines, well past the server's (it ends a replication session silent for
    // standbyRetryMs + readerTimeoutMs) and the reader's check (every 200 ms).
    await waitFor('the standby reading', reading(standby), { timeoutMs: 20_000 });
    await waitFor('the cut reader no longer reading', async () => !(await reading(cut)()), {
      timeoutMs: 20_000,
    });
    await waitFor(
      'the reader gauge at 0',
      async () => (await registry.metrics()).includes('outbox_log_reader_active 0'),
      { timeoutMs: 20_000 },
    );
    const [after] = (await cut.commit([msg('k', { n: 2 })])) as [string];
    await waitFor('delivered by the standby', () => standbyPublisher.sentIds.includes(after), {
      timeoutMs: 30_000,
    });
    expect(cutPublisher.sentIds).toEqual([before]);
    await resolvesWithin('the cut app closing', cut.close(), 15_000);
  });

  it('makes its slot again when it is dropped under it, keeps delivering from the log, and reports the loss in its status, metrics and health', async () => {
    const table = await tailedTable();
    const logs = new CapturingLogger();
    const publisher = new RecordingPublisher();
    const h = await tailingApp(table, publisher, {}, { logger: logs, health: true });
    await waitFor('reading', reading(h));
    const [first] = (await h.commit([msg('k', { n: 1 })])) as [string];
    await waitFor('delivered from the log', () => publisher.sentIds.includes(first));

    // As an operator would: end the reader's session, then drop the slot before it is back.
    const { slot } = names(table);
    await waitFor('the slot dropped', async () => {
      await scope.ds.query(
        'SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL',
        [slot],
      );
      return scope.ds.query('SELECT pg_drop_replication_slot($1)', [slot]).then(
        () => true,
        () => false,
      );
    });
    await waitFor('the loss counted', async () => {
      return (await h.dispatcher.logLagStatus())?.positionLosses === 1;
    });
    await waitFor('the slot back', async () => (await slotRow(table)) !== undefined);
    await waitFor('reading again', reading(h));
    const [later] = (await h.commit([msg('k', { n: 2 })])) as [string];
    await waitFor('delivered from the new slot', () => publisher.sentIds.includes(later));

    expect(await h.dispatcher.logLagStatus()).toMatchObject({
      active: true,
      positionLosses: 1,
      problem: null,
    });
    expect(logs.linesOf(/was dropped; made it again/, 'warn')).toHaveLength(1);
    const registry = new Registry();
    const metrics = new OutboxMetrics({ registry, sampleIntervalMs: 100 });
    metrics.startSampling(h.outbox, h.dispatcher);
    scope.defer(() => metrics.stopSampling());
    await waitFor('the loss counted in the metrics', async () =>
      (await registry.metrics()).includes('outbox_log_position_losses_total 1'),
    );
    expect(await registry.metrics()).toContain('outbox_log_unreadable 0');
    const health = h.moduleRef.get(OutboxHealthIndicator);
    const up = await health.isHealthy('outbox', { requireDispatcher: true });
    expect(up.outbox).toMatchObject({ status: 'up', log: { reading: true, positionLosses: 1 } });
  });

  it('while its dropped slot cannot be made again (an open write transaction), the health check is down saying why; then the slot is back and counted once', async () => {
    const table = await tailedTable();
    const logs = new CapturingLogger();
    const publisher = new RecordingPublisher();
    const h = await tailingApp(
      table,
      publisher,
      { createSlotTimeoutMs: 1_000 },
      { logger: logs, health: true },
    );
    await waitFor('reading', reading(h));
    const runner = scope.ds.createQueryRunner();
    await runner.connect();
    let open = true;
    scope.defer(async () => {
      if (open) await runner.rollbackTransaction().catch(() => undefined);
      await runner.release();
    });
    await runner.startTransaction();
    await runner.query('SELECT txid_current()');
    const { slot } = names(table);
    await waitFor('the slot dropped', async () => {
      await scope.ds.query(
        'SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL',
        [slot],
      );
      return scope.ds.query('SELECT pg_drop_replication_slot($1)', [slot]).then(
        () => true,
        () => false,
      );
    });
    const health = h.moduleRef.get(OutboxHealthIndicator);
    const down = await waitFor('the health check down, saying why', async () => {
      const result = await health.isHealthy('outbox', { requireDispatcher: true });
      const { problems = [] } = result.outbox;
      return problems.some((p) => p.includes('could not be made again'))
        ? result.outbox
        : undefined;
    });
    expect(down.problems).toContainEqual(
      expect.stringContaining(`replication slot ${slot} was dropped and could not be made again`),
    );
    expect(down.log).toMatchObject({ reading: false, positionLosses: 1 });
    expect((await h.dispatcher.logLagStatus())?.problem).toMatch(/could not be made again/);
    expect(logs.linesOf(/could not be made again/, 'warn').length).toBeGreaterThan(0);

    await runner.rollbackTransaction();
    open = false;
    await waitFor('reading again', reading(h), { timeoutMs: 20_000 });
    const up = await health.isHealthy('outbox', { requireDispatcher: true });
    expect(up.outbox).toMatchObject({ status: 'up', log: { reading: true, positionLosses: 1 } });
    const [id] = (await h.commit([msg('k', { n: 1 })])) as [string];
    await waitFor('delivered from the new slot', () => publisher.sentIds.includes(id));
  });

  it('refuses to wait past createSlotTimeoutMs for an open write transaction, naming its pid; outbox log setup then makes the slot', async () => {
    const table = await tailedTable();
    const runner = scope.ds.createQueryRunner();
    await runner.connect();
    let open = true;
    scope.defer(async () => {
      if (open) await runner.rollbackTransaction().catch(() => undefined);
      await runner.release();
    });
    await runner.startTransaction();
    await runner.query('SELECT txid_current()');
    const [{ pid }] = (await runner.query('SELECT pg_backend_pid() AS pid')) as [{ pid: number }];

    const logs = new CapturingLogger();
    const attempt = tailingApp(
      table,
      new RecordingPublisher(),
      { createSlotTimeoutMs: 1_500 },
      { logger: logs },
    );
    const refusal = await resolvesWithin(
      'the refusal',
      attempt.then(
        () => null,
        (e: unknown) => e,
      ),
      30_000,
    );
    expect(refusal).toBeInstanceOf(OutboxReplicationSlotWaitError);
    const error = refusal as OutboxReplicationSlotWaitError;
    expect(error.slot).toBe(names(table).slot);
    expect(error.blockers.map((b) => b.pid)).toContain(pid);
    expect(error.message).toMatch(new RegExp(`pid ${pid}\\b`));
    expect(error.message).toContain('outbox log setup');
    expect(logs.linesOf(/Making replication slot/, 'log')).toHaveLength(1);
    expect(await slotRow(table)).toBeUndefined();

    await runner.rollbackTransaction();
    open = false;
    const setup = await cli(['log', 'setup', '--table', table]);
    expect(setup.code).toBe(0);
    expect(setup.out).toContain(`Made replication slot ${names(table).slot}`);
    expect(await slotRow(table)).toBeDefined();
    const again = await cli(['log', 'setup', '--table', table]);
    expect(again.out).toContain('was already there');
    const publisher = new RecordingPublisher();
    const h = await tailingApp(table, publisher);
    await waitFor('reading', reading(h));
    const [id] = (await h.commit([msg('k', { n: 1 })])) as [string];
    await waitFor('delivered from the log', () => publisher.sentIds.includes(id));
  });

  it('refuses to start on a table its publication does not cover, naming the command for that table, which then makes it start', async () => {
    const table = await tailedTable(true);
    const refusal = await tailingApp(table, new RecordingPublisher()).then(
      () => null,
      (e: unknown) => e,
    );
    expect(refusal).toBeInstanceOf(Error);
    const message = (refusal as Error).message;
    expect(message).toContain(`does not exist`);
    expect(message).toContain(`logTailingMigration({ tableName: '${table}' })`);
    // The command as printed, run as is: for this table, not the default one.
    const command = /"npx outbox ([^"]+)" with DATABASE_URL set/.exec(message)?.[1];
    expect(command).toBe(`log setup --table ${table}`);
    expect((await cli((command ?? '').split(' '))).code).toBe(0);
    const publisher = new RecordingPublisher();
    const h = await tailingApp(table, publisher);
    await waitFor('reading', reading(h));
    const [id] = (await h.commit([msg('k', { n: 1 })])) as [string];
    await waitFor('delivered from the log', () => publisher.sentIds.includes(id));
  });

  it('outbox log setup adds a table made again to its publication, which dropping the table had emptied', async () => {
    const table = await tailedTable(true);
    expect((await cli(['log', 'setup', '--table', table])).code).toBe(0);
    await dropOutboxTable(scope.ds, table);
    await ensureOutboxTable(scope.ds, { tableName: table, ...testPartitioning(scope.ds) });
    const covered = async () => {
      const rows: unknown[] = await scope.ds.query(
        'SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3',
        [names(table).publication, 'public', table],
      );
      return rows.length === 1;
    };
    expect(await covered()).toBe(false);

    const again = await cli(['log', 'setup', '--table', table]);
    expect(again.code).toBe(0);
    expect(await covered()).toBe(true);
    const publisher = new RecordingPublisher();
    const h = await tailingApp(table, publisher);
    await waitFor('reading', reading(h));
    const [id] = (await h.commit([msg('k', { n: 1 })])) as [string];
    await waitFor('delivered from the log', () => publisher.sentIds.includes(id));
  });
});
