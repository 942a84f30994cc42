import { DataSource } from 'typeorm';
import { CapturingLogger } from '../support/capturing-logger';
import { readAttempts, readOutbox, serverConnection, type OutboxRow } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import { dispatchTestApp, mergeOutboxOptions } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import {
  describeSource,
  POLL_RUN_DATABASES,
  SERVER_SOURCE_CASES,
  useSource,
} from '../support/sources';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { FaultProxy, type FaultProxyCut } from '../../lib/testing';
import { expectNever, sleep, waitFor } from '../support/wait-for';
import { CLAIM_LOOP } from '../support/test-claims';

// The database goes away under a draining dispatcher: its DataSource reaches the server through
// a TCP proxy that the test cuts, while the test enqueues and reads on a direct connection. An
// uncaught error or unhandled rejection (a driver's 'error' event nobody listens to) fails the
// test through jest-circus's global handlers.

const TOTAL = 2_000;
const KEYS = 100;
/** Each publish call takes this long, so that the drain is still running at the cut. */
const PUBLISH_MS = 100;
/** Longer than the watchdog's bound (dbTimeoutMs + its margin): a blackholed call is given up on. */
const OUTAGE_MS = 4_000;
const DB_TIMEOUT_MS = 1_000;
/** Part of the outage, at its end, in which nothing may be published. */
const QUIET_MS = 1_000;
const CUTS: readonly FaultProxyCut[] = ['reset', 'blackhole'];

// What holds whatever the source of new messages (the table's poll or the database's log,
// test/support/sources.ts): a cut of the database mid-drain loses nothing, charges no attempt,
// keeps each key's order, and delivery resumes once it is back. The log's reader reaches the
// server through the proxy too (it logs in with the DataSource's settings), and the table,
// which it sweeps every second here, takes what it left.
for (const source of SERVER_SOURCE_CASES) {
  const { db } = source;
  const name = db.name === 'postgres' ? 'postgres' : 'mariadb';
  describeSource(source, 'the dispatcher across a database cut', () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_o' });
    const src = useSource(scope, source);

    /** A DataSource of the app under test, through a proxy in front of the server. */
    async function proxied(): Promise<{ proxy: FaultProxy; dataSource: DataSource }> {
      const direct = serverConnection(name);
      const proxy = await FaultProxy.start(
        { host: direct.host, port: direct.port },
        { lifetimeMs: 60_000 },
      );
      scope.defer(() => proxy.close());
      const dataSource = new DataSource({ ...direct, host: '127.0.0.1', port: proxy.port });
      await dataSource.initialize();
      scope.defer(() => dataSource.destroy());
      return { proxy, dataSource };
    }

    for (const cut of CUTS) {
      it(`a ${cut} of the database mid-drain loses nothing, charges no attempt, and delivery resumes once it is back`, async () => {
        const table = await scope.table();
        const observed = await src.prepare(table, { sweepIntervalMs: 1_000 });
        const { proxy, dataSource } = await proxied();
        const enqueuer = await scope.open({ table });
        const publisher = new RecordingPublisher().slow(PUBLISH_MS);
        const logs = new CapturingLogger();
        const app = await scope.open(
          {
            ...dispatchTestApp(
              publisher,
              mergeOutboxOptions(observed, {
                dispatcher: {
                  leaseMs: 6_000,
                  publishTimeoutMs: 2_000,
                  dbTimeoutMs: DB_TIMEOUT_MS,
                  maxOutagePauseMs: 500,
                  // The LISTEN connection goes through the proxy too, and must come back.
                  listen: db.name === 'postgres',
                },
              }),
            ),
            table,
            logger: logs,
          },
          dataSource,
        );
        // The log's reader runs already: it is to read every message below.
        await src.started(table);
        const keys = Array.from({ length: KEYS }, (_, k) => `key-${k}`);
        const ids: string[] = [];
        for (let tx = 0; tx < TOTAL / KEYS; tx++)
          ids.push(...(await enqueuer.enqueue(keys.map((key) => msg(key, { tx })))));
        if (source.name === 'poll') await app.dispatcher.start();

        await publisher.until((p) => p.sent.length >= TOTAL / 4, 20_000, 'a quarter published');
        proxy.cut(cut);
        const cutAt = Date.now();
        await waitFor(
          'the dispatcher to try the database while it is gone',
          () => proxy.blocked > 0,
          {
            timeoutMs: OUTAGE_MS - QUIET_MS,
          },
        );
        // Batches claimed before the cut may still publish; nothing claimed after it can.
        await sleep(cutAt + OUTAGE_MS - QUIET_MS - Date.now());
        const sentInOutage = publisher.sent.length;
        await expectNever(
          'a publish while the database is unreachable',
          () => publisher.sent.length > sentInOutage,
          QUIET_MS,
        );
        expect(sentInOutage).toBeLessThan(TOTAL);

        proxy.restore();
        await waitFor(
          'delivery to resume after the database returns',
          () => publisher.sent.length > sentInOutage,
          { timeoutMs: 3_000 },
        );
        const rows = await waitFor(
          'every row delivered',
          async () => {
            const all = await readOutbox(scope.ds, table);
            return all.every((r) => r.status === 'delivered') ? all : undefined;
          },
          { timeoutMs: 30_000, intervalMs: 100 },
        );

        // Nothing lost, nothing published twice, every key in commit order.
        expect(rows).toHaveLength(TOTAL);
        expect(publisher.sentIds).toHaveLength(TOTAL);
        expect(new Set(publisher.sentIds).size).toBe(TOTAL);
        for (const [k, key] of keys.entries())
          expect(publisher.sentForKey(key)).toEqual(ids.filter((_, i) => i % KEYS === k));
        // The publisher never failed: the outage charged nothing, not even to the messages of a
        // claim the database committed and whose answer the cut lost (given back by its token).
        const charged = (r: OutboxRow) => r.attempts !== 1;
        expect(rows.filter(charged).map((r) => [r.messageId, r.attempts])).toEqual([]);
        expect((await readAttempts(scope.ds, table)).filter((a) => a.outcome !== 'outage')).toEqual(
          [],
        );
        expect(logs.lines.filter((line) => line.level === 'fatal')).toEqual([]);
      });
    }
  });
}

// A claim whose answer a cut lost, on the poll (the log's lease by id has its own in
// test/log-tailing/); the sources project runs only the block above.
for (const db of POLL_RUN_DATABASES) {
  const service = db.service;
  if (service === null) continue;
  const name = db.name === 'postgres' ? 'postgres' : 'mariadb';
  describeWith([service], `the dispatcher across a database outage on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_o', options: CLAIM_LOOP });

    /** A DataSource of the app under test, through a proxy in front of the server. */
    async function proxied(): Promise<{ proxy: FaultProxy; dataSource: DataSource }> {
      const direct = serverConnection(name);
      const proxy = await FaultProxy.start(
        { host: direct.host, port: direct.port },
        { lifetimeMs: 60_000 },
      );
      scope.defer(() => proxy.close());
      const dataSource = new DataSource({ ...direct, host: '127.0.0.1', port: proxy.port });
      await dataSource.initialize();
      scope.defer(() => dataSource.destroy());
      return { proxy, dataSource };
    }

    // The dispatcher makes the claim's token itself, so a claim that threw after committing is
    // given back by token (OutboxStore.releaseClaim) before the next claim, not left leased
    // until the lease ends and claimed again with a second attempt.
    it('a claim the database committed but whose answer the outage lost charges no attempt', async () => {
      const table = await scope.table();
      const { proxy, dataSource } = await proxied();
      const enqueuer = await scope.open({ table });
      const [id] = (await enqueuer.enqueue([msg('k')])) as [string];
      const publisher = new RecordingPublisher();
      const app = await scope.open(
        {
          ...dispatchTestApp(publisher, {
            dispatcher: {
              leaseMs: 3_000,
              publishTimeoutMs: 1_000,
              dbTimeoutMs: 500,
              maxOutagePauseMs: 200,
            },
          }),
          table,
          logger: new CapturingLogger(),
        },
        dataSource,
      );
      const { store } = app;
      const claim = store.claim.bind(store);
      let first = true;
      store.claim = (options) => {
        if (first) proxy.resetOnAnswerTo(/\bCOMMIT\b/);
        first = false;
        return claim(options);
      };
      expect(await app.dispatcher.runOnce()).toMatchObject({ claimed: 0 });
      // The server committed the claim: leased, with its attempt counted.
      expect(await enqueuer.row(id)).toMatchObject({ attempts: 1, lockedBy: 'dispatch-test' });

      proxy.restore();
      await waitFor(
        'the message to be delivered',
        async () => {
          await app.dispatcher.runOnce();
          return (await enqueuer.row(id)).status === 'delivered';
        },
        { timeoutMs: 10_000 },
      );
      expect(publisher.sentIds).toEqual([id]);
      expect((await enqueuer.row(id)).attempts).toBe(1);
    });
  });
}
