import { Module, type INestApplicationContext, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { DataSource } from 'typeorm';
import { OutboxModule, type OutboxRecord } from '../../lib';
import type { OutboxLogObserver } from 'nestjs-outbox/log-tailing';
import { CapturingLogger as CapturedLogs } from '../support/capturing-logger';
import { RecordingPublisher } from '../support/recording.publisher';
import { testDatabase, uniqueTable } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import { mergeOutboxOptions } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import {
  describeSource,
  describeWithOnPoll,
  partitionedOn,
  SOURCE_CASES,
  useSource,
} from '../support/sources';
import { expectNever, resolvesWithin, waitFor } from '../support/wait-for';

// Shutdown: a dispatcher that is closed aborts what it could not publish in time and records
// what the publisher answered (test/dispatch/shutdown-answers.spec.ts has the answers). Without app.enableShutdownHooks(), SIGTERM kills the process before it can, and the
// outbox says so at bootstrap when its dispatcher runs (those tests boot a real application
// context, as a worker's main.ts does, rather than a testing module: the warning is about it).

const postgres = testDatabase('postgres');

class CapturingLogger implements LoggerService {
  readonly warnings: string[] = [];
  log(): void {}
  error(): void {}
  warn(message: unknown): void {
    this.warnings.push(String(message));
  }
}

// The hooks warning and the settle left behind are the poll's run only (the sources project
// runs the source-parameterised block).
describeWithOnPoll([], 'the shutdown hooks warning', () => {
  let ds: DataSource;
  let table: string;
  let app: INestApplicationContext | undefined;

  beforeEach(async () => {
    table = uniqueTable('outbox_stop');
    ds = await postgres.open(table);
    // The check reads the process's SIGTERM listeners: none may be left over from elsewhere.
    expect(process.listenerCount('SIGTERM')).toBe(0);
  });

  afterEach(async () => {
    await app?.close();
    app = undefined;
    await postgres.close(ds, table);
  });

  async function boot(
    autoStart: boolean,
    hooks: boolean,
    claims?: 'leases',
  ): Promise<CapturingLogger> {
    const logger = new CapturingLogger();
    @Module({
      imports: [
        OutboxModule.forRoot({
          dataSource: ds,
          tableName: table,
          publisher: new RecordingPublisher(),
          autoStart,
          dispatcher: { listen: false, ...(claims === undefined ? {} : { claims }) },
        }),
      ],
    })
    class AppModule {}
    // As a worker's main.ts does: the context is initialised before enableShutdownHooks().
    app = await NestFactory.createApplicationContext(AppModule, { logger });
    if (hooks) app.enableShutdownHooks();
    return logger;
  }

  const aboutHooks = (logger: CapturingLogger) => (): string | undefined =>
    logger.warnings.find((w) => w.includes('enableShutdownHooks'));

  it('warns when the dispatcher runs and nothing handles SIGTERM: partitions held until their heartbeat runs out (the default on this table)', async () => {
    const logger = await boot(true, false);
    const warning = await waitFor('the warning', aboutHooks(logger));
    expect(warning).toMatch(/SIGTERM/);
    expect(warning).toMatch(/delivery partitions stay held .*5000 ms/);
  });

  it("warns when the dispatcher runs and nothing handles SIGTERM: claimed messages leased until leaseMs ends ('leases')", async () => {
    const logger = await boot(true, false, 'leases');
    const warning = await waitFor('the warning', aboutHooks(logger));
    expect(warning).toMatch(/SIGTERM/);
    expect(warning).toMatch(/leased .*30000 ms/);
  });

  it('stays quiet when the app enabled shutdown hooks', async () => {
    const logger = await boot(true, true);
    await expectNever('a shutdown hooks warning', aboutHooks(logger), 2_000);
  });

  it('stays quiet when the dispatcher does not start at bootstrap', async () => {
    const logger = await boot(false, false);
    await expectNever('a shutdown hooks warning', aboutHooks(logger), 2_000);
  });
});

// What holds whatever the source of new messages (the table's poll or the database's log,
// test/support/sources.ts): closing the app is bounded by shutdownTimeoutMs, records a publish it
// had to abort as timed out (the broker may have its messages), and loses nothing: the next
// start delivers it.
for (const source of SOURCE_CASES) {
  describeSource(source, 'shutdown', () => {
    const scope = useOutboxScope(source.db, { tablePrefix: 'outbox_stop' });
    const src = useSource(scope, source);

    it('settles a hung publish on shutdown within shutdownTimeoutMs as timed out, and the next start delivers it', async () => {
      const publisher = new RecordingPublisher();
      publisher.fail(() => true, 'hang');
      // Publish timeout and lease far beyond the test: only the shutdown timeout can end the hung publish.
      const h = await src.boot(
        publisher,
        { dispatcher: { shutdownTimeoutMs: 300, leaseMs: 600_000, publishTimeoutMs: 300_000 } },
        { sweepIntervalMs: 1_000 },
      );
      const ids = await h.commit([msg('a'), msg('b'), msg(null), msg(null)]);
      // The poll's dispatcher is driven by hand; the log's runs already.
      const run = source.name === 'poll' ? h.dispatcher.runOnce() : undefined;
      await publisher.until((p) => p.hanging === 1, 5_000, 'the publish to hang');
      // Leased by this dispatcher; an owner of partitions leases no row.
      const leasedBy = partitionedOn(source.db) ? null : h.instanceId;
      expect((await h.rows()).map((r) => r.lockedBy)).toEqual(ids.map(() => leasedBy));

      const started = Date.now();
      await resolvesWithin('close() with a hung publish', h.close(), 15_000);
      // In-flight publishes got their grace period before being aborted.
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
      // The publish answered the abort by throwing: that says nothing of what reached the
      // broker, so each message counts a timed-out attempt and is retried after a backoff.
      if (run !== undefined) {
        expect(await run).toMatchObject({
          claimed: 4,
          published: 0,
          released: 0,
          retried: 4,
          fenced: 0,
        });
      }
      expect((await h.rows()).map((r) => [r.status, r.lockedBy, r.attempts])).toEqual(
        ids.map(() => ['pending', null, 1]),
      );
      expect(publisher.sent).toHaveLength(0);
      expect(publisher.closed).toBe(true);

      // Nothing lost: the next start of the app delivers every message, each once. Settled,
      // they are pending rows of the table (the log acknowledged past them): the poll claims
      // them, the log source's sweep (every second here) does.
      const next = new RecordingPublisher();
      const restarted = await src.dispatcherApp(h.table, next, { autoStart: true });
      await src.deliver(restarted, 'the released messages after a restart', async () =>
        (await restarted.rows()).every((r) => r.status === 'delivered'),
      );
      expect([...next.sentIds].sort()).toEqual([...ids].sort());
      expect((await restarted.rows()).map((r) => r.attempts)).toEqual(ids.map(() => 2));
    });

    it("returns when the publisher's close() never settles, and says what it left running", async () => {
      const logs = new CapturedLogs();
      const publisher = new (class extends RecordingPublisher {
        override close(): Promise<void> {
          return new Promise<void>(() => undefined);
        }
      })();
      const table = await scope.table();
      const observed = await src.prepare(table);
      const h = await scope.open({
        table,
        publisher,
        logger: logs,
        options: mergeOutboxOptions(observed, {
          autoStart: true,
          dispatcher: { shutdownTimeoutMs: 300, pollIntervalMs: 50 },
        }),
      });
      await src.started(table);
      const [id] = await h.commit([msg('a')]);
      await waitFor('the message delivered', async () =>
        (await h.rows()).every((r) => r.status === 'delivered'),
      );
      expect(publisher.sentIds).toEqual([id]);

      await resolvesWithin(
        "close() with a publisher's close() that never settles",
        h.close(),
        15_000,
      );

      const left = logs.linesOf(/^Dispatcher stopped .*still running/, 'warn');
      expect(left).toHaveLength(1);
      expect(left[0]?.message).toMatch(/the publisher's close\(\)/);
      expect(logs.linesOf(/^Dispatcher stopped/, 'log')).toEqual([]);
    });
  });
}

describeWithOnPoll(['postgres'], 'shutdown past shutdownTimeoutMs on postgres', () => {
  const scope = useOutboxScope(postgres, { tablePrefix: 'outbox_stop_log' });

  it('returns while a settle waits on a row lock, naming the batch it left settling', async () => {
    const logs = new CapturedLogs();
    const table = await scope.table('outbox_stop_lock');
    // Another session locks the leased row while the batch publishes: the settle waits for it.
    const other = scope.ds.createQueryRunner();
    await other.connect();
    await other.startTransaction();
    const publisher = new (class extends RecordingPublisher {
      override async publish(records: readonly OutboxRecord[], signal: AbortSignal) {
        await other.query(`SELECT 1 FROM "${table}" WHERE message_id = $1 FOR UPDATE`, [
          records[0]?.messageId,
        ]);
        return super.publish(records, signal);
      }
    })();
    const h = await scope.open({
      table,
      publisher,
      logger: logs,
      options: {
        dispatcher: { shutdownTimeoutMs: 300, dbTimeoutMs: 60_000, leaseMs: 600_000 },
      },
    });
    const [id] = await h.commit([msg('a')]);
    const run = h.dispatcher.runOnce();
    await waitFor('the settle waiting on the lock', async () => {
      const rows: unknown[] = await scope.ds.query(
        `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
        [`%UPDATE%${table}%`],
      );
      return rows.length > 0;
    });

    try {
      await resolvesWithin('close() with a settle waiting on a lock', h.close(), 15_000);
    } finally {
      await other.rollbackTransaction();
      await other.release();
    }

    const left = logs.linesOf(/^Dispatcher stopped .*still running/, 'warn');
    expect(left.map((l) => l.message)).toEqual([
      expect.stringMatching(
        /batch [0-9a-f]{8} \(1 message\(s\) from the (claim loop|partition owner), settling\)/,
      ),
    ]);
    // Let go, the settle lands: the message was published and is recorded so.
    expect((await run).published).toBe(1);
    expect(publisher.sentIds).toEqual([id]);
    expect((await h.row(id ?? '')).status).toBe('delivered');
  });

  // Log tailing takes no partitions yet: left out where the suites deliver by partitions.
  (partitionedOn({ name: 'postgres' }) ? it.skip : it)(
    'returns within shutdownTimeoutMs and names the log reader it left running (not under partitions: they take no log observer yet)',
    async () => {
      const logs = new CapturedLogs();
      let reading = false;
      // A reader stuck where no abort reaches it (a connect that never answers, a dead socket).
      const observer: OutboxLogObserver = {
        kind: 'log',
        sweepIntervalMs: 3_600_000,
        create: () => ({
          check: () => Promise.resolve(),
          run: () => {
            reading = true;
            return new Promise<void>(() => undefined);
          },
          acknowledge: () => Promise.resolve(),
          lag: () => Promise.resolve({ retainedBytes: null, active: false }),
        }),
      };
      const publisher = new RecordingPublisher();
      const h = await scope.open({
        publisher,
        logger: logs,
        options: { autoStart: true, dispatcher: { shutdownTimeoutMs: 300, observe: observer } },
      });
      await waitFor('the reader started', () => reading);

      await resolvesWithin('close() with a log reader that never stops', h.close(), 15_000);

      const left = logs.linesOf(/^Dispatcher stopped .*still running/, 'warn');
      expect(left).toHaveLength(1);
      expect(left[0]?.message).toMatch(/the log reader/);
      expect(publisher.closed).toBe(true);
    },
  );
});
