import { randomUUID } from 'node:crypto';
import type {
  OutboxDispatcherOptions,
  OutboxMessage,
  OutboxPublisher,
  OutboxRecord,
  PublishOutcome,
} from '../../lib';
import { ALL_PARTITIONS } from '../../lib/store/shared-sql/delivery-partitions';
import type { OutboxDeliveryPartitionsPort } from '../../lib/store/ports/outbox-store.port';
import { DispatcherChild } from '../support/children/spawn-dispatcher';
import { TcpConsumer } from '../support/children/tcp-consumer';
import { DataSource, type QueryRunner } from 'typeorm';
import { PostgresOutboxStore } from '../../lib/store/postgres/postgres.store';
import { postgresReadOwned } from '../../lib/store/postgres/postgres.delivery-partitions-sql';
import { POSTGRES_CLAIMED_COLUMNS } from '../../lib/store/postgres/postgres.sql';
import { readOutbox, serverOptions, TEST_DATABASES, type OutboxRow } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import { dispatchTestApp } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { holdFirstCallOf, RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { expectNever, waitFor } from '../support/wait-for';
import { CapturingLogger } from '../support/capturing-logger';
import { partitionsFor } from '../../lib/dispatch/partitions/partition-assignment';
import { leasesModeLockOf } from '../../lib/store/shared-sql/leases-mode-lock';
import { outboxTableNames } from '../../lib/internal/sql-identifier';
import { POSTGRES_OWNER_LOCK_CLASS } from '../../lib/store/shared-sql/owner-leases';

// Partitioned delivery (`dispatcher.claims: 'partitions'`, PostgreSQL): what only this mode has.
// The delivery promises themselves run on it in the default run, where a mode left out on
// PostgreSQL is 'partitions' (the `leases` project runs them again with row leases).

const partitions = { claims: 'partitions', partitionTimeoutMs: 1_000 } as const;

/** A publisher whose first call ignores the abort and runs `holdMs`: each call's window. */
class DeafFirstCall implements OutboxPublisher {
  readonly calls: { ids: string[]; start: number; end?: number }[] = [];
  constructor(private readonly holdMs: number) {}

  async publish(records: readonly OutboxRecord[]): Promise<readonly PublishOutcome[]> {
    const call: { ids: string[]; start: number; end?: number } = {
      ids: records.map((r) => r.messageId),
      start: performance.now(),
    };
    this.calls.push(call);
    if (this.calls.length === 1) await new Promise((resolve) => setTimeout(resolve, this.holdMs));
    call.end = performance.now();
    return records.map(() => ({ ok: true }));
  }

  /** Pairs of calls that sent one message while both ran. */
  overlaps(): string[] {
    const found: string[] = [];
    for (const [i, a] of this.calls.entries()) {
      for (const b of this.calls.slice(i + 1)) {
        const shared = a.ids.filter((id) => b.ids.includes(id));
        if (shared.length > 0 && b.start < (a.end ?? Infinity)) found.push(...shared);
      }
    }
    return found;
  }
}

/** The generations of partitions taken. */
function fenceOf(taken: ReadonlyMap<number, { generation: string }>): Map<number, string> {
  return new Map([...taken].map(([p, t]) => [p, t.generation]));
}

/** Per key, the message ids in id (= commit) order, from the table. */
function idOrderByKey(rows: readonly OutboxRow[]): Map<string | null, string[]> {
  const byKey = new Map<string | null, string[]>();
  for (const r of rows) byKey.set(r.key, [...(byKey.get(r.key) ?? []), r.messageId]);
  return byKey;
}

for (const db of TEST_DATABASES.filter((d) => d.name === 'postgres')) {
  describeWith(['postgres'], `partitioned delivery on ${db.name}`, () => {
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_p' });

    async function table(): Promise<{
      table: string;
      commit(messages: OutboxMessage[]): Promise<string[]>;
      store: OutboxDeliveryPartitionsPort;
    }> {
      const name = await scope.table();
      const app = await scope.open({ table: name });
      const store = app.store.deliveryPartitions;
      if (store === undefined) throw new Error('no partition store on postgres');
      return { table: name, commit: (messages) => app.enqueue(messages), store };
    }

    /**
     * Holds `<table>_dispatchers` locked for `ms`: no heartbeat lands meanwhile, so an owner
     * lapses once its timeout has passed.
     */
    async function lockDispatchers(name: string, ms: number): Promise<void> {
      const blocker = scope.ds.createQueryRunner();
      await blocker.connect();
      try {
        await blocker.startTransaction();
        await blocker.query(`LOCK TABLE "${name}_dispatchers" IN ACCESS EXCLUSIVE MODE`);
        await new Promise((resolve) => setTimeout(resolve, ms));
        await blocker.commitTransaction();
      } finally {
        await blocker.release();
      }
    }

    /** A `'partitions'` dispatcher on `name` that polls every 50 ms, started. */
    function openOwner(name: string, publisher: OutboxPublisher, instanceId: string) {
      return scope.open({
        ...dispatchTestApp(publisher, {
          autoStart: true,
          instanceId,
          dispatcher: { ...partitions, pollIntervalMs: 50 },
        }),
        table: name,
      });
    }

    /** Waits until every message of `name` is delivered. */
    async function everyDelivered(
      name: string,
      timeoutMs = 15_000,
      intervalMs?: number,
    ): Promise<void> {
      await waitFor(
        'every message delivered',
        async () => (await readOutbox(scope.ds, name)).every((r) => r.status === 'delivered'),
        { timeoutMs, ...(intervalMs === undefined ? {} : { intervalMs }) },
      );
    }

    /** Ten keys, twelve transactions of a message each: the ids, in commit order. */
    async function keyedBacklog(
      commit: (messages: OutboxMessage[]) => Promise<string[]>,
    ): Promise<{ keys: string[]; ids: string[] }> {
      const keys = Array.from({ length: 10 }, (_, k) => `key-${k}`);
      const ids: string[] = [];
      for (let tx = 0; tx < 12; tx++) ids.push(...(await commit(keys.map((k) => msg(k, { tx })))));
      return { keys, ids };
    }

    /** A dispatcher process on `name` sending to the TCP consumer on `port`, killed at the end. */
    async function startChild(
      name: string,
      port: number,
      instanceId: string,
      dispatcher: OutboxDispatcherOptions,
      hangAfter?: number,
    ): Promise<DispatcherChild> {
      const child = await DispatcherChild.start({
        db: 'postgres',
        table: name,
        instanceId,
        tcpPort: port,
        dispatcher,
        ...(hangAfter === undefined ? {} : { hangAfter }),
      });
      scope.defer(() => child.kill('SIGKILL').catch(() => undefined));
      return child;
    }

    /**
     * Every message arrived, and per key the first arrivals keep commit order (what a killed
     * owner had sent may come again: at least once after a crash).
     */
    async function expectEveryArrivedInOrder(
      consumer: TcpConsumer,
      name: string,
      keys: readonly string[],
      ids: readonly string[],
    ): Promise<void> {
      expect(new Set(consumer.arrivals.map((a) => a.messageId))).toEqual(new Set(ids));
      const order = idOrderByKey(await readOutbox(scope.ds, name));
      for (const key of keys) {
        const seen = consumer.arrivals.filter((a) => a.key === key).map((a) => a.messageId);
        const firsts = seen.filter((id, i) => seen.indexOf(id) === i);
        expect(firsts).toEqual(order.get(key));
      }
    }

    it("reads a row committed before its snapshot as due, though its statement's clock started before the row's transaction", async () => {
      const { table: name, commit } = await table();
      const read = postgresReadOwned(
        outboxTableNames(name, null, 'double'),
        null,
        POSTGRES_CLAIMED_COLUMNS,
      );
      const reader = scope.ds.createQueryRunner();
      await reader.connect();
      try {
        // The reader's now() is fixed here, before the writer's transaction begins; its next
        // statement takes a snapshot in which the writer has committed (READ COMMITTED): a read
        // that stalls between its start and its snapshot.
        await reader.startTransaction();
        await reader.query('SELECT now()');
        await new Promise((resolve) => setTimeout(resolve, 20));
        const [id] = await commit([msg('k', { n: 1 })]);
        const rows = (await reader.query(read, [ALL_PARTITIONS, 10, '0', [], []])) as {
          message_id: string | null;
        }[];
        expect(rows.map((r) => r.message_id).filter((m) => m !== null)).toEqual([id]);
      } finally {
        await reader.rollbackTransaction();
        await reader.release();
      }
    });

    it('reads every partition without naming them as a read naming them all does: its limit, start, skipped ids and keys kept', async () => {
      const { table: name, commit, store } = await table();
      const keys = Array.from({ length: 12 }, (_, i) => `every-${i}`);
      const ids = await commit(keys.map((key) => msg(key, { key })));
      const partitionOf = new Map(
        (
          await scope.ds.query<{ message_id: string; p: number }[]>(
            `SELECT message_id::text AS message_id, delivery_partition AS p FROM "${name}"`,
          )
        ).map((r) => [r.message_id, Number(r.p)]),
      );
      const rows = await readOutbox(scope.ds, name);
      const rowOf = (id: string) => rows.find((r) => r.messageId === id) as OutboxRow;
      const read = async (
        partitions: readonly number[],
        limit: number,
        after: string,
        skip: readonly string[],
        skipKeys: readonly string[],
      ) =>
        (
          await store.readOwned(partitions, limit, { after, ids: skip, keys: skipKeys })
        ).records.map((r) => r.messageId);
      const [first, second, third] = ids as [string, string, string];
      const skip = [String(rowOf(second).id)];
      // Everything after the first row, but the second's id and the third's key, at most 8.
      const asked = [String(rowOf(first).id), skip, [keys[2] as string]] as const;
      const every = await read(ALL_PARTITIONS, 8, ...asked);
      expect(every).toEqual(
        ids.filter((id) => id !== first && id !== second && id !== third).slice(0, 8),
      );
      // The same read naming each partition but the first's: the list is read, and left out.
      const lessOne = ALL_PARTITIONS.filter((p) => p !== partitionOf.get(ids[3] as string));
      expect(await read(lessOne, 8, ...asked)).toEqual(
        ids
          .filter((id) => id !== first && id !== second && id !== third)
          .filter((id) => partitionOf.get(id) !== partitionOf.get(ids[3] as string))
          .slice(0, 8),
      );
    });

    it("refuses a settle from an owner whose partitions were taken over, and takes the new owner's", async () => {
      const { table: name, commit, store } = await table();
      const [id] = (await commit([msg('k', { n: 1 })])) as [string];
      const rows = await readOutbox(scope.ds, name);
      const partition = (
        await scope.ds.query<{ p: number }[]>(
          `SELECT delivery_partition AS p FROM "${name}" WHERE message_id = $1`,
          [id],
        )
      )[0]?.p as number;
      const row = rows[0] as OutboxRow;

      const member = (id: string, validMs: number) => ({ id, label: id, validMs });
      await store.beat(member('old', 60_000), false);
      const old = fenceOf(await store.take('old', [partition]));
      expect([...old.keys()]).toEqual([partition]);
      const read = await store.readOwned([partition], 10, { after: '0', ids: [], keys: [] });
      expect(read.records.map((r) => r.messageId)).toEqual([id]);
      // A live owner's partition is not taken…
      await store.beat(member('new', 60_000), false);
      expect((await store.take('new', [partition])).size).toBe(0);
      // …but once its heartbeat is older than what it promised, it is, at a higher generation.
      await store.beat(member('old', 10), true);
      await new Promise((resolve) => setTimeout(resolve, 50));
      const taken = fenceOf(await store.take('new', [partition]));
      expect(BigInt(taken.get(partition) as string)).toBeGreaterThan(
        BigInt(old.get(partition) as string),
      );
      const settlement = {
        delivered: [row.id],
        retry: [],
        dead: [],
        release: [],
        advancedKeys: ['k'],
      };
      expect((await store.settleOwned('old', old, settlement, false, randomUUID())).changed).toBe(
        0,
      );
      expect((await readOutbox(scope.ds, name))[0]).toMatchObject({
        status: 'pending',
        attempts: 0,
      });
      expect((await store.settleOwned('new', taken, settlement, false, randomUUID())).changed).toBe(
        1,
      );
      expect((await readOutbox(scope.ds, name))[0]).toMatchObject({
        status: 'delivered',
        attempts: 1,
      });
    });

    it('a settle sent again after its answer was lost changes nothing: one attempt, one history row', async () => {
      const { table: name, commit, store } = await table();
      const [retried, released] = (await commit([msg('a', { n: 1 }), msg('b', { n: 2 })])) as [
        string,
        string,
      ];
      const rows = await readOutbox(scope.ds, name);
      const idOf = (m: string): string => rows.find((r) => r.messageId === m)?.id as string;
      await store.beat({ id: 'settler', label: 'settler', validMs: 60_000 }, false);
      const fence = fenceOf(await store.take('settler', ALL_PARTITIONS));
      const settlement = {
        delivered: [],
        retry: [{ id: idOf(retried), delayMs: 60_000, error: 'no', errorClass: 'Error' }],
        dead: [],
        release: [
          {
            id: idOf(released),
            delayMs: 60_000,
            error: 'outage',
            errorClass: 'PublisherUnavailableError',
          },
        ],
        advancedKeys: [],
      };
      const token = randomUUID();
      expect((await store.settleOwned('settler', fence, settlement, false, token)).changed).toBe(2);
      // The COMMIT landed but its answer did not: the settle is sent again, as is.
      expect((await store.settleOwned('settler', fence, settlement, false, token)).changed).toBe(0);
      const after = await readOutbox(scope.ds, name);
      expect(after.find((r) => r.messageId === retried)).toMatchObject({
        status: 'pending',
        attempts: 1,
      });
      expect(after.find((r) => r.messageId === released)).toMatchObject({
        status: 'pending',
        attempts: 0,
      });
      const history = await scope.ds.query<{ message_id: string; outcome: string }[]>(
        `SELECT message_id::text AS message_id, outcome FROM "${name}_attempts" ORDER BY outcome`,
      );
      expect(history.map((h) => h.outcome)).toEqual(['outage', 'retry']);
    });

    it('two dispatchers divide the partitions and deliver every message once, in key order, as one joins and one leaves', async () => {
      const { table: name, commit } = await table();
      // One publisher for both: its record is the broker's order.
      const publisher = new RecordingPublisher().slow(5);
      const options = {
        autoStart: true,
        dispatcher: { ...partitions, batchSize: 20, pollIntervalMs: 50 },
      };
      const a = await scope.open({
        ...dispatchTestApp(publisher, { ...options, instanceId: 'part-a' }),
        table: name,
      });
      const ids: string[] = [];
      const keys = Array.from({ length: 40 }, (_, k) => `key-${k}`);
      for (let tx = 0; tx < 5; tx++) ids.push(...(await commit(keys.map((k) => msg(k, { tx })))));
      // A second dispatcher joins mid-drain: the partitions move to it once idle here.
      const b = await scope.open({
        ...dispatchTestApp(publisher, { ...options, instanceId: 'part-b' }),
        table: name,
      });
      for (let tx = 5; tx < 10; tx++) ids.push(...(await commit(keys.map((k) => msg(k, { tx })))));
      await waitFor(
        'both holding partitions',
        async () => {
          const owners = await scope.ds.query<{ owner: string; n: string }[]>(
            `SELECT d.label AS owner, count(*) AS n FROM "${name}_owners" AS w JOIN "${name}_dispatchers" AS d ON d.instance = w.owner GROUP BY d.label`,
          );
          const by = new Map(owners.map((o) => [o.owner, Number(o.n)]));
          return (by.get('part-a') ?? 0) > 0 && (by.get('part-b') ?? 0) > 0;
        },
        { timeoutMs: 15_000 },
      );
      // One leaves (a graceful stop hands its partitions back); the other takes them all.
      await a.close();
      for (let tx = 10; tx < 15; tx++) ids.push(...(await commit(keys.map((k) => msg(k, { tx })))));
      await everyDelivered(name, 30_000);
      // What an operator sees, once the leaver's partitions are taken (at the next heartbeat,
      // whether or not a message of theirs came meanwhile): one live owner holding all 256.
      await waitFor(
        'the partitions handed back taken over',
        async () => (await b.admin.partitionOwners())?.length === 1,
        { timeoutMs: 10_000 },
      );
      expect(await b.admin.partitionOwners()).toEqual([
        {
          owner: expect.stringMatching(/^part-b#[0-9a-f]{12}$/) as string,
          label: 'part-b',
          partitions: ALL_PARTITIONS.length,
          heartbeatAgeMs: expect.any(Number) as number,
          live: true,
        },
      ]);
      expect(publisher.sentIds).toHaveLength(ids.length);
      expect(new Set(publisher.sentIds).size).toBe(ids.length);
      const order = idOrderByKey(await readOutbox(scope.ds, name));
      for (const key of keys) expect(publisher.sentForKey(key)).toEqual(order.get(key));
      await b.close();
    });

    it("a dispatcher that joins gets its share from the owner at once, told by the members notice rather than at the owner's next beat", async () => {
      const { table: name } = await table();
      // Beats 12 s apart (2.4 s while partitions change hands): without the notice the joiner,
      // whose first beat finds every partition held, could take nothing before its second beat,
      // 2.4 s after its start.
      const options = (instanceId: string) =>
        dispatchTestApp(new RecordingPublisher(), {
          autoStart: true,
          instanceId,
          dispatcher: { ...partitions, partitionTimeoutMs: 60_000, pollIntervalMs: 50 },
        });
      const held = async (label: string): Promise<number> => {
        const [row] = await scope.ds.query<{ n: string }[]>(
          `SELECT count(*) AS n FROM "${name}_owners" AS w JOIN "${name}_dispatchers" AS d ON d.instance = w.owner WHERE d.label = $1`,
          [label],
        );
        return Number(row?.n ?? 0);
      };
      const a = await scope.open({ ...options('join-a'), table: name });
      expect(await held('join-a')).toBe(ALL_PARTITIONS.length);
      const b = await scope.open({ ...options('join-b'), table: name });
      await waitFor('the joiner holding its share', async () => (await held('join-b')) > 0, {
        timeoutMs: 2_000,
        intervalMs: 20,
      });
      // And the leaver's partitions go back at once as well: a graceful stop announces it.
      await b.close();
      await waitFor(
        "the leaver's partitions taken back",
        async () => (await held('join-a')) === ALL_PARTITIONS.length,
        { timeoutMs: 2_000, intervalMs: 20 },
      );
      await a.close();
    });

    it('after its heartbeat lapsed mid-publish, an owner taking its partitions back does not publish a message again while the lapsed call runs', async () => {
      const { table: name, commit } = await table();
      const publisher = new DeafFirstCall(3_000);
      const app = await openOwner(name, publisher, 'lapsing-owner');
      const [id] = (await commit([msg('k', { n: 1 })])) as [string];
      await waitFor('the first call running', () => publisher.calls.length === 1);
      // The heartbeat cannot land while the dispatchers' table is locked: past the timeout the
      // owner lapses, and the pipeline stops waiting for the deaf call.
      await lockDispatchers(name, 1_500);
      await waitFor(
        'the message delivered',
        async () => (await readOutbox(scope.ds, name))[0]?.status === 'delivered',
        { timeoutMs: 15_000 },
      );
      // Published again once the lapsed call had returned (at least once), never beside it.
      expect(publisher.calls.length).toBeGreaterThanOrEqual(2);
      expect(publisher.calls.every((c) => c.ids.includes(id))).toBe(true);
      expect(publisher.overlaps()).toEqual([]);
      await app.close();
    });

    it("a lapse while a key's run is in flight and its next message waits behind it: both delivered, in order, once heartbeats land again", async () => {
      const { table: name, commit } = await table();
      const publisher = new DeafFirstCall(3_000);
      const app = await openOwner(name, publisher, 'lapsing-with-queue');
      const [first] = (await commit([msg('k', { n: 1 })])) as [string];
      await waitFor('the first call running', () => publisher.calls.length === 1);
      const [next] = (await commit([msg('k', { n: 2 })])) as [string];
      const [other] = (await commit([msg('o', { n: 3 })])) as [string];
      // Read after `next` committed: `next` waits in memory behind `first`'s call.
      await waitFor('the other key published', () =>
        publisher.calls.some((c) => c.ids.includes(other)),
      );
      // Nothing of the owner's partitions is readable while it has lapsed.
      await lockDispatchers(name, 1_500);
      await everyDelivered(name);
      const firstSent = (id: string): number =>
        publisher.calls.findIndex((c) => c.ids.includes(id));
      expect(firstSent(first)).toBeLessThan(firstSent(next));
      expect(publisher.overlaps()).toEqual([]);
      await app.close();
    });

    /** A process's row (by its label) and how many partitions it holds. */
    async function memberOf(
      name: string,
      label: string,
    ): Promise<{ held: number; lockKey: number | null; validMs: number | null }> {
      const rows = await scope.ds.query<
        { held: number; lock_key: number | null; valid_ms: number | null }[]
      >(
        `SELECT (SELECT count(*)::int FROM "${name}_owners" AS w WHERE w.owner = d.instance) AS held,
           d.lock_key, d.valid_ms FROM "${name}_dispatchers" AS d WHERE d.label = $1`,
        [label],
      );
      const row = rows[0];
      return {
        held: row?.held ?? 0,
        lockKey: row?.lock_key ?? null,
        validMs: row?.valid_ms ?? null,
      };
    }

    /** Waits until the two processes labelled `a` and `b` hold every partition between them. */
    async function dividedBetween(name: string, a: string, b: string): Promise<void> {
      await waitFor(
        'the partitions divided between the two',
        async () => {
          const [x, y] = [await memberOf(name, a), await memberOf(name, b)];
          return x.held > 0 && y.held > 0 && x.held + y.held === ALL_PARTITIONS.length;
        },
        { timeoutMs: 15_000 },
      );
    }

    /** Each partition's owner and generation, from the table. */
    async function ownersOf(
      name: string,
    ): Promise<Map<number, { owner: string | null; generation: string }>> {
      const rows = await scope.ds.query<{ p: number; owner: string | null; generation: string }[]>(
        `SELECT partition AS p, owner, generation::text AS generation FROM "${name}_owners"`,
      );
      return new Map(rows.map((r) => [Number(r.p), { owner: r.owner, generation: r.generation }]));
    }

    it('a lapse costs no copy of what the broker confirmed before it: confirmed messages are settled, the rest published again', async () => {
      const { table: name, commit } = await table();
      // The first call confirms its first message at once, then sends nothing more until the
      // lapse aborts it, and answers the abort: the first confirmed, the rest never written.
      const calls: string[][] = [];
      const publisher: OutboxPublisher = {
        async publish(records, signal) {
          calls.push(records.map((r) => r.messageId));
          if (calls.length > 1) return records.map(() => ({ ok: true }) as const);
          await new Promise<void>((resolve) =>
            signal.addEventListener('abort', () => resolve(), { once: true }),
          );
          return records.map((_, i): PublishOutcome =>
            i === 0 ? { ok: true } : { ok: false, error: signal.reason, sent: false },
          );
        },
      };
      const app = await openOwner(name, publisher, 'lapse-confirmed');
      const ids = await commit([msg('a', { n: 1 }), msg('b', { n: 2 }), msg('c', { n: 3 })]);
      await waitFor('the first call running', () => calls.length === 1);
      await lockDispatchers(name, 1_500);
      await everyDelivered(name);
      const confirmed = calls[0]?.[0] as string;
      expect(ids).toContain(confirmed);
      // Sent once: settled as confirmed by the lapsed owner, whose partitions no one took.
      expect(calls.flat().filter((id) => id === confirmed)).toHaveLength(1);
      expect(new Set(calls.flat())).toEqual(new Set(ids));
      await app.close();
    });

    it('after a lapse, an owner gives back what the table still names it for and it no longer wants, so that its rightful owner takes it', async () => {
      const { table: name, store } = await table();
      const a = await openOwner(name, new RecordingPublisher(), 'forgetful');
      await waitFor('every partition held', async () =>
        [...(await ownersOf(name)).values()].every((o) => o.owner?.startsWith('forgetful#')),
      );
      const aId = [...(await ownersOf(name)).values()][0]?.owner as string;
      // Its heartbeat cannot land while the dispatchers' table is locked: past the timeout it
      // lapses and drops everything in memory, though the table still names it for all 256.
      // Meanwhile a peer came back to life: live when the lapsed owner's beat lands again.
      const blocker = scope.ds.createQueryRunner();
      await blocker.connect();
      try {
        await blocker.startTransaction();
        await blocker.query(`LOCK TABLE "${name}_dispatchers" IN ACCESS EXCLUSIVE MODE`);
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        await blocker.query(
          `INSERT INTO "${name}_dispatchers" (instance, label, valid_ms, working) VALUES ('peer#1', 'peer', 600000, true)`,
        );
        await blocker.commitTransaction();
      } finally {
        await blocker.release();
      }
      const peerShare = partitionsFor('peer#1', ['peer#1', aId]);
      expect(peerShare.length).toBeGreaterThan(0);
      // Once its beats land again (live, heartbeat fresh), the peer's share comes free: handed
      // back, not kept unread under a live heartbeat.
      await waitFor(
        "the peer's share handed back",
        async () => {
          const owners = await ownersOf(name);
          return peerShare.every((p) => owners.get(p)?.owner === null);
        },
        { timeoutMs: 10_000 },
      );
      await store.beat({ id: 'peer#1', label: 'peer', validMs: 600_000 }, true);
      expect((await store.take('peer#1', peerShare)).size).toBe(peerShare.length);
      const owners = await ownersOf(name);
      for (const [p, o] of owners) expect(o.owner).toBe(peerShare.includes(p) ? 'peer#1' : aId);
      await a.close();
    });

    it("judges each owner by the validity it promised, not the taker's: owners with different partitionTimeoutMs never take from each other while both live", async () => {
      const { table: name, commit } = await table();
      const publisher = new RecordingPublisher();
      const open = (instanceId: string, partitionTimeoutMs: number) =>
        scope.open({
          ...dispatchTestApp(publisher, {
            autoStart: true,
            instanceId,
            dispatcher: { claims: 'partitions', partitionTimeoutMs, pollIntervalMs: 50 },
          }),
          table: name,
        });
      await open('patient', 10_000);
      await open('hasty', 1_500);
      await waitFor(
        'the partitions divided',
        async () => {
          const labels = new Set(
            [...(await ownersOf(name)).values()].map((o) => o.owner?.split('#')[0]),
          );
          return labels.has('patient') && labels.has('hasty') && !labels.has(undefined);
        },
        { timeoutMs: 15_000 },
      );
      const before = await ownersOf(name);
      // The patient owner beats every 2 s: the hasty one, judging by its own 1.5 s, would take
      // its partitions between two of its beats.
      const ids: string[] = [];
      for (let i = 0; i < 12; i++) {
        ids.push(...(await commit(Array.from({ length: 10 }, (_, k) => msg(`key-${k}`, { i })))));
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
      await publisher.until((p) => ids.every((id) => p.sentIds.includes(id)), 15_000, 'all sent');
      expect(await ownersOf(name)).toEqual(before);
      expect(publisher.sentIds).toHaveLength(new Set(publisher.sentIds).size);
    });

    it('a key whose next row falls due after the one behind it: each message published once, in order (a park never takes the rows the owner holds)', async () => {
      const name = await scope.table();
      const publisher = new RecordingPublisher();
      const app = await scope.open({
        ...dispatchTestApp(publisher, { dispatcher: { ...partitions, pollIntervalMs: 100 } }),
        table: name,
      });
      const enqueue = (n: number, delayMs?: number) =>
        scope.ds.transaction((m) =>
          app.outbox.enqueue(msg('a', { n }), m, delayMs === undefined ? undefined : { delayMs }),
        );
      const a1 = await enqueue(1);
      const a2 = await enqueue(2);
      const a3 = await enqueue(3, 1_500);
      const a4 = await enqueue(4);
      // One read finds a1, a2 and a4, due; a4 waits behind a3, which is not. Its key was parked
      // with a2 in the batch, whose delivered settle then skipped a2 (no longer pending), and the
      // promotion after it sent a2 again.
      await waitFor(
        'every message delivered',
        async () => {
          await app.dispatcher.drain();
          return (await app.rows()).every((r) => r.status === 'delivered');
        },
        { timeoutMs: 15_000 },
      );
      expect(publisher.sentIds).toEqual([a1, a2, a3, a4]);
      expect((await app.rows()).map((r) => r.attempts)).toEqual([1, 1, 1, 1]);
    });

    it('drain() delivers a dead letter retried since the last sweep, and the messages its key held: its row lies below the read floor, so a drain sweeps first', async () => {
      const { table: name, commit } = await table();
      const publisher = new RecordingPublisher();
      // The periodic sweep is a minute away: only the drain's own can find the retried row.
      const app = await scope.open({
        ...dispatchTestApp(publisher, { dispatcher: { ...partitions, pollIntervalMs: 60_000 } }),
        table: name,
      });
      const [a1, a2, a3] = await commit([
        msg('a', { n: 1 }),
        msg('a', { n: 2 }),
        msg('a', { n: 3 }),
      ]);
      publisher.fail(a1 as string, 'permanent', { times: 1 });
      await app.dispatcher.drain();
      expect((await app.rows()).map((r) => [r.messageId, r.status])).toEqual([
        [a1, 'dead'],
        [a2, 'waiting'],
        [a3, 'waiting'],
      ]);

      expect(await app.outbox.retryDead([a1 as string])).toBe(1);
      await app.dispatcher.drain();
      expect(publisher.sentForKey('a')).toEqual([a1, a2, a3]);
      expect((await app.rows()).every((r) => r.status === 'delivered')).toBe(true);
    });

    // Issue 76, item 1: this mode leases no row, so it starts no unlocker; its owners promote
    // the waiting rows nothing holds back any more themselves (the unlocker's safety net).
    it("starts no unlocker: an owner promotes the waiting messages nothing holds back any more (ordering.onDeadLetter changed from 'block' to 'skip')", async () => {
      const { table: name, commit } = await table();
      const publisher = new RecordingPublisher();
      publisher.fail((r) => (JSON.parse(String(r.payload)) as { n?: number }).n === 1, 'permanent');
      const open = (onDeadLetter: 'block' | 'skip') =>
        scope.open({
          ...dispatchTestApp(publisher, {
            autoStart: true,
            dispatcher: { ...partitions, pollIntervalMs: 50 },
            ordering: { onDeadLetter },
            unlocker: { intervalMs: 200 },
          }),
          table: name,
        });
      const blocking = await open('block');
      const [head] = await commit([msg('k', { n: 1 })]);
      await waitFor(
        'the head dead',
        async () => (await blocking.row(head ?? '')).status === 'dead',
      );
      const later = await commit([msg('k', { n: 2 }), msg('k', { n: 3 })]);
      await waitFor('the later messages parked behind it', async () =>
        (await readOutbox(scope.ds, name))
          .filter((r) => later.includes(r.messageId))
          .every((r) => r.status === 'waiting'),
      );
      await blocking.close();
      // Every unlocker run clears expired leases first: none may run in this mode.
      const unlocks = jest.spyOn(PostgresOutboxStore.prototype, 'releaseExpired');
      scope.defer(() => Promise.resolve(unlocks.mockRestore()));
      await open('skip');
      await waitFor('the parked messages delivered', async () =>
        (await readOutbox(scope.ds, name))
          .filter((r) => later.includes(r.messageId))
          .every((r) => r.status === 'delivered'),
      );
      expect(publisher.sentForKey('k')).toEqual(later);
      await new Promise((resolve) => setTimeout(resolve, 600));
      expect(unlocks).not.toHaveBeenCalled();
    });

    it("refreshes the table's statistics once it parked many rows, so that its reads are not planned as walks of the whole table", async () => {
      const { table: name, commit } = await table();
      const publisher = new RecordingPublisher();
      publisher.fail((r) => (JSON.parse(String(r.payload)) as { n?: number }).n === 1, 'permanent');
      const app = await scope.open({
        ...dispatchTestApp(publisher, {
          autoStart: true,
          dispatcher: { ...partitions, pollIntervalMs: 50 },
        }),
        table: name,
      });
      const analyses = async (): Promise<number> =>
        Number(
          (
            await scope.ds.query<{ n: string }[]>(
              `SELECT analyze_count AS n FROM pg_stat_user_tables WHERE relname = $1`,
              [name],
            )
          )[0]?.n ?? 0,
        );
      const before = await analyses();
      const [head] = await commit([msg('k', { n: 1 })]);
      await waitFor('the head dead', async () => (await app.row(head ?? '')).status === 'dead');
      // 10 000 behind the dead head, as a bulk write would leave them: counted pending.
      for (let chunk = 0; chunk < 5; chunk++) {
        await commit(
          Array.from({ length: 2_000 }, (_, i) => msg('k', { n: 2 + chunk * 2_000 + i })),
        );
      }
      await waitFor(
        'the 10 000 parked',
        async () =>
          Number(
            (
              await scope.ds.query<{ n: string }[]>(
                `SELECT count(*) AS n FROM "${name}" WHERE status = 'waiting'`,
              )
            )[0]?.n,
          ) === 10_000,
        { timeoutMs: 30_000 },
      );
      await waitFor('an ANALYZE of the table', async () => (await analyses()) > before);
      expect(publisher.sentForKey('k')).toEqual([]);
    });

    it('two processes given one instanceId own the partitions apart: each message published once', async () => {
      const { table: name, commit } = await table();
      const publisher = new RecordingPublisher().slow(2);
      const open = () =>
        scope.open({
          ...dispatchTestApp(publisher, {
            autoStart: true,
            instanceId: 'same-id',
            dispatcher: { ...partitions, batchSize: 20, pollIntervalMs: 50 },
          }),
          table: name,
        });
      await open();
      await open();
      await waitFor(
        'the partitions divided between two processes',
        async () => new Set([...(await ownersOf(name)).values()].map((o) => o.owner)).size === 2,
        { timeoutMs: 15_000 },
      );
      const keys = Array.from({ length: 30 }, (_, k) => `key-${k}`);
      const ids: string[] = [];
      for (let tx = 0; tx < 10; tx++) ids.push(...(await commit(keys.map((k) => msg(k, { tx })))));
      await publisher.until((p) => ids.every((id) => p.sentIds.includes(id)), 20_000, 'all sent');
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(publisher.sentIds).toHaveLength(ids.length);
      const order = idOrderByKey(await readOutbox(scope.ds, name));
      for (const key of keys) expect(publisher.sentForKey(key)).toEqual(order.get(key));
    });

    it("waits, delivering nothing, while a dispatcher of the 'leases' mode holds the table's mode lock, and delivers once it is gone", async () => {
      const { table: name, commit } = await table();
      // What a 'leases' dispatcher holds on its owner-lock session while it may claim.
      const lock = leasesModeLockOf(outboxTableNames(name, null, 'double'));
      const leases = scope.ds.createQueryRunner();
      await leases.connect();
      await leases.query('SELECT pg_advisory_lock_shared($1, $2)', [lock.lockClass, lock.key]);
      const logger = new CapturingLogger();
      const publisher = new RecordingPublisher();
      await scope.open({
        ...dispatchTestApp(publisher, {
          autoStart: true,
          instanceId: 'waiting-owner',
          dispatcher: { ...partitions, pollIntervalMs: 50 },
        }),
        table: name,
        logger,
      });
      const ids = await commit([msg('k', { n: 1 }), msg('other', { n: 2 })]);
      await expectNever('a message published', () => publisher.sentIds.length > 0, 1_500);
      expect([...(await ownersOf(name)).values()].every((o) => o.owner === null)).toBe(true);
      expect(
        logger.lines.filter((l) =>
          l.message.includes("while dispatchers of the 'leases' mode work this table"),
        ),
      ).toHaveLength(1);
      await leases.release();
      await publisher.until((p) => ids.every((id) => p.sentIds.includes(id)), 10_000, 'all sent');
      expect(
        logger.lines.some((l) =>
          l.message.includes("no dispatcher of the 'leases' mode works this table any more"),
        ),
      ).toBe(true);
    });

    it("a rolling deploy switching the mode either way publishes nothing twice: the new mode waits until the old one's last dispatcher stops", async () => {
      const { table: name, commit } = await table();
      const publisher = new RecordingPublisher().slow(2);
      const logger = new CapturingLogger();
      const open = (instanceId: string, claims: 'leases' | 'partitions') =>
        scope.open({
          ...dispatchTestApp(publisher, {
            autoStart: true,
            instanceId,
            dispatcher: { claims, partitionTimeoutMs: 1_000, pollIntervalMs: 50, batchSize: 20 },
          }),
          table: name,
          logger,
        });
      const keys = Array.from({ length: 10 }, (_, k) => `key-${k}`);
      const ids: string[] = [];
      const wave = async (n: number): Promise<void> => {
        for (let tx = 0; tx < n; tx++) ids.push(...(await commit(keys.map((k) => msg(k, { tx })))));
      };
      const sentAll = () =>
        publisher.until((p) => ids.every((id) => p.sentIds.includes(id)), 20_000, 'all sent');
      const said = (text: string) => logger.lines.some((l) => l.message.includes(text));

      const oldLeases = await open('old-leases', 'leases');
      await wave(5);
      const newPartitions = await open('new-partitions', 'partitions');
      await wave(5);
      await waitFor('the partitions dispatcher waiting', () =>
        said("while dispatchers of the 'leases' mode work this table"),
      );
      await sentAll();
      // Everything so far went through the 'leases' dispatcher: no partition was ever taken.
      expect([...(await ownersOf(name)).values()].every((o) => o.owner === null)).toBe(true);
      await oldLeases.close();
      await wave(5);
      await sentAll();
      expect([...(await ownersOf(name)).values()].every((o) => o.owner !== null)).toBe(true);

      // And back: a 'leases' dispatcher waits while the 'partitions' one delivers.
      const back = await open('back-to-leases', 'leases');
      await waitFor('the leases dispatcher waiting', () =>
        said("Claiming nothing while dispatchers of the 'partitions' mode deliver"),
      );
      await wave(5);
      await sentAll();
      await newPartitions.close();
      await wave(5);
      await sentAll();
      expect(said("of the 'partitions' mode delivers from this table any more")).toBe(true);
      expect(publisher.sentIds).toHaveLength(ids.length);
      const order = idOrderByKey(await readOutbox(scope.ds, name));
      for (const key of keys) expect(publisher.sentForKey(key)).toEqual(order.get(key));
      await back.close();
    });

    it('a shutdown whose publish ignores the abort leases its rows: once the app closed its pool and the partitions moved on, the next owner waits for the lease, never publishing beside the call', async () => {
      const { table: name, commit } = await table();
      const publisher = new DeafFirstCall(5_000);
      const dispatcher = {
        ...partitions,
        pollIntervalMs: 50,
        shutdownTimeoutMs: 300,
        leaseMs: 8_000,
      };
      // The closing app's own pool, closed after it as TypeORM's module does.
      const ownPool = new DataSource(serverOptions('postgres'));
      await ownPool.initialize();
      scope.defer(() => (ownPool.isInitialized ? ownPool.destroy() : Promise.resolve()));
      const closing = await scope.open(
        {
          ...dispatchTestApp(publisher, { autoStart: true, instanceId: 'closing', dispatcher }),
          table: name,
        },
        ownPool,
      );
      const [id] = (await commit([msg('k', { n: 1 })])) as [string];
      await waitFor('the deaf call running', () => publisher.calls.length === 1);
      await scope.open({
        ...dispatchTestApp(publisher, { autoStart: true, instanceId: 'next', dispatcher }),
        table: name,
      });
      await closing.close();
      await ownPool.destroy();
      await waitFor(
        'the message delivered',
        async () => (await readOutbox(scope.ds, name))[0]?.status === 'delivered',
        { timeoutMs: 30_000 },
      );
      expect(publisher.calls.length).toBeGreaterThanOrEqual(2);
      expect(publisher.calls.every((c) => c.ids.includes(id))).toBe(true);
      expect(publisher.overlaps()).toEqual([]);
    });

    it('finds a message whose lower id commits after a higher one was read, without waiting for a sweep', async () => {
      const { table: name, commit } = await table();
      const publisher = new RecordingPublisher();
      // Sweeps from the start of the table every 2 minutes: only reads from the floor remain.
      const app = await scope.open({
        ...dispatchTestApp(publisher, {
          autoStart: true,
          instanceId: 'late-commit-owner',
          dispatcher: { ...partitions, pollIntervalMs: 120_000 },
        }),
        table: name,
      });
      const [first] = (await commit([msg('warm', { n: 0 })])) as [string];
      await publisher.until((p) => p.sentIds.includes(first), 10_000, 'the first message');
      // The slow transaction takes its id first, and commits after a later one was delivered.
      const slow = scope.ds.createQueryRunner();
      await slow.connect();
      let late: string | undefined;
      try {
        await slow.startTransaction();
        [late] = (await app.outbox.enqueue([msg('late', { n: 1 })], slow.manager)) as [string];
        const [early] = (await commit([msg('early', { n: 2 })])) as [string];
        await publisher.until((p) => p.sentIds.includes(early), 10_000, 'the later id');
        await slow.commitTransaction();
      } finally {
        await slow.release();
      }
      const lower = late;
      await publisher.until((p) => p.sentIds.includes(lower), 10_000, 'the id committed late');
      const rows = await readOutbox(scope.ds, name);
      const idOf = (m: string): bigint => BigInt(rows.find((r) => r.messageId === m)?.id ?? -1);
      expect(idOf(lower)).toBeLessThan(idOf(publisher.sentIds[1] as string));
      await app.close();
    });

    it('finds a message whose transaction was given its id after that of a later row that committed first, without waiting for a sweep', async () => {
      const { table: name } = await table();
      const publisher = new RecordingPublisher();
      // Sweeps every 2 minutes, beats seldom: only reads from the floor bring rows out soon.
      const app = await scope.open({
        ...dispatchTestApp(publisher, {
          autoStart: true,
          instanceId: 'unlisted-writer-owner',
          dispatcher: { ...partitions, partitionTimeoutMs: 60_000, pollIntervalMs: 120_000 },
        }),
        table: name,
      });
      const [first] = await app.enqueue([msg('warm', { n: 0 })]);
      await publisher.until(
        (p) => p.sentIds.includes(first as string),
        10_000,
        'the first message',
      );
      // A writer that sends no NOTIFY after its commits: each wake-up below is sent inside the
      // transaction that commits, so no other transaction ends between a commit and the read it
      // wakes (a NOTIFY of its own would end one, given a newer transaction id).
      const writer = await scope.open({ table: name, options: { dispatcher: { listen: false } } });
      const wake = (runner: QueryRunner): Promise<unknown> =>
        runner.query('SELECT pg_notify($1, $2)', [`public_${name}`, '']);
      const older = scope.ds.createQueryRunner();
      const newer = scope.ds.createQueryRunner();
      await older.connect();
      await newer.connect();
      let lower: string | undefined;
      try {
        // `older` is given its transaction id first, `newer` the next; `newer` takes the lower
        // row id and `older` the higher, and `older` commits first. The read it wakes has a
        // snapshot whose xmax is one past `older`: `newer`, running, is not listed in it.
        await older.startTransaction();
        await older.query('SELECT txid_current()');
        await newer.startTransaction();
        [lower] = (await writer.outbox.enqueue([msg('lower', { n: 1 })], newer.manager)) as [
          string,
        ];
        const [higher] = (await writer.outbox.enqueue(
          [msg('higher', { n: 2 })],
          older.manager,
        )) as [string];
        await wake(older);
        await older.commitTransaction();
        await publisher.until((p) => p.sentIds.includes(higher), 10_000, 'the higher id');
        await wake(newer);
        await newer.commitTransaction();
      } finally {
        await older.release();
        await newer.release();
      }
      const late = lower;
      await publisher.until(
        (p) => p.sentIds.includes(late),
        10_000,
        'the lower id, committed last',
      );
      const rows = await readOutbox(scope.ds, name);
      const idOf = (m: string): bigint => BigInt(rows.find((r) => r.messageId === m)?.id ?? -1);
      expect(idOf(late)).toBeLessThan(idOf(publisher.sentIds[1] as string));
      await writer.close();
      await app.close();
    });

    it("a settle whose answer was lost, sent again, lets its key's next message go at once: the owner reads the table again instead of waiting for the sweep", async () => {
      const { table: name, commit } = await table();
      const publisher = new RecordingPublisher();
      const { holding, release } = holdFirstCallOf(publisher, 'a');
      // Sweeps from the start of the table every 2 minutes: only reads from the floor remain.
      const app = await scope.open({
        ...dispatchTestApp(publisher, {
          autoStart: true,
          instanceId: 'lost-settle-answer',
          dispatcher: { ...partitions, pollIntervalMs: 120_000 },
        }),
        table: name,
      });
      const store = app.store.deliveryPartitions;
      if (store === undefined) throw new Error('no partition store on postgres');
      const [first] = (await commit([msg('a', { n: 1 })])) as [string];
      await waitFor('the first message to reach the broker', holding);
      const [next] = (await commit([msg('a', { n: 2 })])) as [string];
      const [other] = (await commit([msg('b', { n: 3 })])) as [string];
      // Read after `next` committed: `next` waits in memory behind `first`.
      await publisher.until((p) => p.sentIds.includes(other), 10_000, 'the other key');
      const rowId = (await readOutbox(scope.ds, name)).find((r) => r.messageId === first)?.id;
      // The settle of `first` commits, and its answer is lost: the retry changes nothing.
      const settleOwned = store.settleOwned.bind(store);
      let lost = 0;
      store.settleOwned = async (...args) => {
        const answer = await settleOwned(...args);
        if (lost === 0 && args[2].delivered.includes(rowId as string)) {
          lost++;
          throw new Error('the connection closed before the answer of COMMIT arrived');
        }
        return answer;
      };
      release();
      await publisher.until((p) => p.sentIds.includes(next), 10_000, "the key's next message");
      expect(lost).toBe(1);
      expect(publisher.sentForKey('a')).toEqual([first, next]);
      await waitFor('every row settled as delivered, once', async () =>
        (await readOutbox(scope.ds, name)).every(
          (r) => r.status === 'delivered' && r.attempts === 1,
        ),
      );
      await app.close();
    });

    it('a SIGKILLed owner is taken over within its heartbeat timeout: nothing lost, per-key order kept', async () => {
      const consumer = new TcpConsumer();
      const port = await consumer.start();
      scope.defer(() => consumer.stop().catch(() => undefined));
      const { table: name, commit } = await table();
      const { keys, ids } = await keyedBacklog(commit);
      const dispatcher = { ...partitions, batchSize: 20, pollIntervalMs: 50, listen: false };
      const doomed = await startChild(name, port, 'doomed-owner', dispatcher, 25);
      const survivor = await startChild(name, port, 'survivor-owner', dispatcher);
      await doomed.waitFor('hanging', 30_000);
      await doomed.kill('SIGKILL');
      await everyDelivered(name, 60_000, 100);
      await expectEveryArrivedInOrder(consumer, name, keys, ids);
      await survivor.kill('SIGTERM').catch(() => undefined);
    });

    it('a SIGKILLed owner whose heartbeat holds a minute is taken over once its owner lock is free, long before: nothing lost, per-key order kept', async () => {
      const consumer = new TcpConsumer();
      const port = await consumer.start();
      scope.defer(() => consumer.stop().catch(() => undefined));
      const { table: name, commit } = await table();
      const { keys, ids } = await keyedBacklog(commit);
      const dispatcher = { ...partitions, batchSize: 20, pollIntervalMs: 50, listen: false };
      // Its heartbeat promises a minute: without the owner lock, nobody takes its partitions
      // before the wait below ends.
      const doomed = await startChild(
        name,
        port,
        'doomed-owner',
        { ...dispatcher, partitionTimeoutMs: 60_000 },
        25,
      );
      await doomed.waitFor('hanging', 30_000);
      // Read before the survivor joins: the doomed owner may hand it its idle partitions then.
      const before = await memberOf(name, 'doomed-owner');
      expect(before.held).toBe(256);
      expect(before.lockKey).not.toBeNull();
      const survivor = await startChild(name, port, 'survivor-owner', dispatcher);
      await doomed.kill('SIGKILL');
      await everyDelivered(name, 30_000, 100);
      // Its heartbeat was ended early, not waited out.
      expect((await memberOf(name, 'doomed-owner')).validMs).toBeLessThan(60_000);
      await expectEveryArrivedInOrder(consumer, name, keys, ids);
      await survivor.kill('SIGTERM').catch(() => undefined);
    });

    it('a look answers the processes whose owner lock is free and those lapsing, not one that beats on time, however short its partitionTimeoutMs', async () => {
      const { table: name, store } = await table();
      const holder = scope.ds.createQueryRunner();
      await holder.connect();
      scope.defer(async () => {
        await holder.query('SELECT pg_advisory_unlock_all()');
        await holder.release();
      });
      const key = (): number => 1 + Math.floor(Math.random() * 2_000_000_000);
      const [onTime, lapsing, gone] = [key(), key(), key()];
      for (const held of [onTime, lapsing]) {
        await holder.query('SELECT pg_advisory_lock($1::int4, $2::int4)', [
          POSTGRES_OWNER_LOCK_CLASS,
          held,
        ]);
      }
      // Rows as heartbeats leave them: one just beaten with a 1 s timeout (a beat every 200 ms,
      // the whole timeout within the grace), one that last beat 4.5 s into its 5 s, one whose
      // lock no session holds.
      await scope.ds.query(
        `INSERT INTO "${name}_dispatchers" (instance, label, valid_ms, working, lock_key, heartbeat_at)
         VALUES ('a', 'on-time', 1000, true, $1, now()),
                ('b', 'lapsing', 5000, true, $2, now() - interval '4500 milliseconds'),
                ('c', 'gone', 60000, true, $3, now())`,
        [onTime, lapsing, gone],
      );
      const look = async () =>
        (await store.endGoneMembers?.('observer', 1_250))
          ?.map(({ label, cut }) => ({ label, cut }))
          .sort((x, y) => x.label.localeCompare(y.label));
      expect(await look()).toEqual([
        { label: 'gone', cut: true },
        { label: 'lapsing', cut: false },
      ]);
      // Its key is cleared: the next look answers it as ending, not cut again.
      expect((await memberOf(name, 'gone')).lockKey).toBeNull();
      expect(await look()).toEqual([
        { label: 'gone', cut: false },
        { label: 'lapsing', cut: false },
      ]);
    });

    it("a stall longer than the owner lock's validity is not taken for a crash: the lock's session is kept, no partition changes hands, and the owners deliver on under the same locks", async () => {
      const { table: name, commit } = await table();
      const publisher = new RecordingPublisher().slow(2);
      const logger = new CapturingLogger();
      const open = (instanceId: string) =>
        scope.open({
          // The default heartbeat timeout: a stall of 1.5 s lapses the owner locks (valid 1 s
          // after their last answered question), not the heartbeats.
          ...dispatchTestApp(publisher, {
            autoStart: true,
            instanceId,
            dispatcher: { claims: 'partitions', batchSize: 20, pollIntervalMs: 50 },
          }),
          table: name,
          logger,
        });
      await open('stalled-a');
      await open('stalled-b');
      await dividedBetween(name, 'stalled-a', 'stalled-b');
      const keys = Array.from({ length: 30 }, (_, k) => `key-${k}`);
      const ids: string[] = [];
      for (let tx = 0; tx < 5; tx++) ids.push(...(await commit(keys.map((k) => msg(k, { tx })))));
      await publisher.until((p) => ids.every((id) => p.sentIds.includes(id)), 20_000, 'all sent');
      const locks = [
        (await memberOf(name, 'stalled-a')).lockKey,
        (await memberOf(name, 'stalled-b')).lockKey,
      ];
      const before = await ownersOf(name);

      // Both dispatchers live in this process: its event loop held up, as by a long GC or a
      // starved CPU, stalls both. Each finds its lock's validity past on waking.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1_500);

      for (let tx = 5; tx < 10; tx++) ids.push(...(await commit(keys.map((k) => msg(k, { tx })))));
      await waitFor(
        'both locks counting again',
        () => logger.linesOf(/its lock's session answered again after/).length >= 2,
        { timeoutMs: 10_000 },
      );
      // Longer than a look and the grace a free lock is given before its partitions are taken.
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      await publisher.until((p) => ids.every((id) => p.sentIds.includes(id)), 20_000, 'all sent');
      expect(await ownersOf(name)).toEqual(before);
      expect([
        (await memberOf(name, 'stalled-a')).lockKey,
        (await memberOf(name, 'stalled-b')).lockKey,
      ]).toEqual(locks);
      expect(logger.linesOf(/owner lock of .* was released/)).toEqual([]);
      const order = idOrderByKey(await readOutbox(scope.ds, name));
      for (const key of keys) {
        const seen = publisher.sentForKey(key);
        expect(seen.filter((id, i) => seen.indexOf(id) === i)).toEqual(order.get(key));
      }
    });

    it('an owner whose owner-lock connection is killed drops what it holds, names a new lock and delivers on: nothing lost, per-key order kept', async () => {
      const { table: name, commit } = await table();
      const publisher = new RecordingPublisher().slow(2);
      const open = (instanceId: string) =>
        scope.open({
          ...dispatchTestApp(publisher, {
            autoStart: true,
            instanceId,
            dispatcher: { ...partitions, batchSize: 20, pollIntervalMs: 50 },
          }),
          table: name,
        });
      await open('cut-owner');
      await open('other-owner');
      await dividedBetween(name, 'cut-owner', 'other-owner');
      const keys = Array.from({ length: 30 }, (_, k) => `key-${k}`);
      const ids: string[] = [];
      for (let tx = 0; tx < 10; tx++) ids.push(...(await commit(keys.map((k) => msg(k, { tx })))));
      const { lockKey } = await memberOf(name, 'cut-owner');
      expect(lockKey).not.toBeNull();
      const killed = await scope.ds.query<{ done: boolean }[]>(
        `SELECT pg_terminate_backend(pid) AS done FROM pg_locks
         WHERE locktype = 'advisory' AND classid = $1::int8::oid AND objid = $2::int8::oid AND objsubid = 2 AND granted`,
        [POSTGRES_OWNER_LOCK_CLASS, lockKey],
      );
      expect(killed).toEqual([{ done: true }]);
      await waitFor(
        'a new lock named, partitions held again',
        async () => {
          const now = await memberOf(name, 'cut-owner');
          return now.lockKey !== null && now.lockKey !== lockKey && now.held > 0;
        },
        { timeoutMs: 15_000 },
      );
      await publisher.until((p) => ids.every((id) => p.sentIds.includes(id)), 20_000, 'all sent');
      expect(new Set(publisher.sentIds)).toEqual(new Set(ids));
      const order = idOrderByKey(await readOutbox(scope.ds, name));
      for (const key of keys) {
        const seen = publisher.sentForKey(key);
        // A publish the lost lock cut short may go again (it was not confirmed): first
        // arrivals keep commit order.
        expect(seen.filter((id, i) => seen.indexOf(id) === i)).toEqual(order.get(key));
      }
    });
  });
}
