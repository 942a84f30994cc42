import type { OutboxMessage, OutboxPublisher, OutboxRecord, PublishOutcome } from '../../lib';
import { ALL_PARTITIONS } from '../../lib/store/shared-sql/delivery-partitions';
import type { OutboxPartitionStore } from '../../lib/store/ports/outbox-store.port';
import { DispatcherChild } from '../support/children/spawn-dispatcher';
import { TcpConsumer } from '../support/children/tcp-consumer';
import { readOutbox, TEST_DATABASES, type OutboxRow } from '../support/databases';
import { msg } from '../support/dispatch-fixtures';
import { dispatchTestApp } from '../support/outbox-harness';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { waitFor } from '../support/wait-for';

// Partitioned delivery (`dispatcher.claims: 'partitions'`, PostgreSQL): what only this mode has.
// The delivery promises themselves run on it in the `partitions` project (npm run
// test:partitions): the dispatch suites with this option.

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
      store: OutboxPartitionStore;
    }> {
      const name = await scope.table();
      const app = await scope.open({ table: name });
      const store = app.store.partitions;
      if (store === undefined) throw new Error('no partition store on postgres');
      return { table: name, commit: (messages) => app.enqueue(messages), store };
    }

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

      await store.beat('old', 60_000);
      const old = await store.take('old', [partition], 60_000);
      expect([...old.keys()]).toEqual([partition]);
      const read = await store.readOwned([partition], 10, { after: '0', ids: [], keys: [] });
      expect(read.records.map((r) => r.messageId)).toEqual([id]);
      // A live owner's partition is not taken…
      await store.beat('new', 60_000);
      expect((await store.take('new', [partition], 60_000)).size).toBe(0);
      // …but once its heartbeat is older than the timeout it is, at a higher generation.
      await new Promise((resolve) => setTimeout(resolve, 50));
      const taken = await store.take('new', [partition], 10);
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
      expect(await store.settleOwned('old', old, settlement, false)).toBe(0);
      expect((await readOutbox(scope.ds, name))[0]).toMatchObject({
        status: 'pending',
        attempts: 0,
      });
      expect(await store.settleOwned('new', taken, settlement, false)).toBe(1);
      expect((await readOutbox(scope.ds, name))[0]).toMatchObject({
        status: 'delivered',
        attempts: 1,
      });
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
            `SELECT owner, count(*) AS n FROM "${name}_owners" GROUP BY owner`,
          );
          const by = new Map(owners.map((o) => [o.owner, Number(o.n)]));
          return (by.get('part-a') ?? 0) > 0 && (by.get('part-b') ?? 0) > 0;
        },
        { timeoutMs: 15_000 },
      );
      // One leaves (a graceful stop hands its partitions back); the other takes them all.
      await a.close();
      for (let tx = 10; tx < 15; tx++) ids.push(...(await commit(keys.map((k) => msg(k, { tx })))));
      await waitFor(
        'every message delivered',
        async () => (await readOutbox(scope.ds, name)).every((r) => r.status === 'delivered'),
        { timeoutMs: 30_000 },
      );
      // What an operator sees, once the leaver's partitions are taken (at the next heartbeat,
      // whether or not a message of theirs came meanwhile): one live owner holding all 256.
      await waitFor(
        'the partitions handed back taken over',
        async () => (await b.admin.partitionOwners())?.length === 1,
        { timeoutMs: 10_000 },
      );
      expect(await b.admin.partitionOwners()).toEqual([
        {
          owner: 'part-b',
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

    it('after its heartbeat lapsed mid-publish, an owner taking its partitions back does not publish a message again while the lapsed call runs', async () => {
      const { table: name, commit } = await table();
      const publisher = new DeafFirstCall(3_000);
      const app = await scope.open({
        ...dispatchTestApp(publisher, {
          autoStart: true,
          instanceId: 'lapsing-owner',
          dispatcher: { ...partitions, pollIntervalMs: 50 },
        }),
        table: name,
      });
      const [id] = (await commit([msg('k', { n: 1 })])) as [string];
      await waitFor('the first call running', () => publisher.calls.length === 1);
      // The heartbeat cannot land while the dispatchers' table is locked: past the timeout the
      // owner lapses, and the pipeline stops waiting for the deaf call.
      const blocker = scope.ds.createQueryRunner();
      await blocker.connect();
      try {
        await blocker.startTransaction();
        await blocker.query(`LOCK TABLE "${name}_dispatchers" IN ACCESS EXCLUSIVE MODE`);
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        await blocker.commitTransaction();
      } finally {
        await blocker.release();
      }
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

    it('a SIGKILLed owner is taken over within its heartbeat timeout: nothing lost, per-key order kept', async () => {
      const consumer = new TcpConsumer();
      const port = await consumer.start();
      scope.defer(() => consumer.stop().catch(() => undefined));
      const { table: name, commit } = await table();
      const keys = Array.from({ length: 10 }, (_, k) => `key-${k}`);
      const ids: string[] = [];
      for (let tx = 0; tx < 12; tx++) ids.push(...(await commit(keys.map((k) => msg(k, { tx })))));
      const dispatcher = { ...partitions, batchSize: 20, pollIntervalMs: 50, listen: false };
      const doomed = await DispatcherChild.start({
        db: 'postgres',
        table: name,
        instanceId: 'doomed-owner',
        tcpPort: port,
        dispatcher,
        hangAfter: 25,
      });
      scope.defer(() => doomed.kill('SIGKILL').catch(() => undefined));
      const survivor = await DispatcherChild.start({
        db: 'postgres',
        table: name,
        instanceId: 'survivor-owner',
        tcpPort: port,
        dispatcher,
      });
      scope.defer(() => survivor.kill('SIGKILL').catch(() => undefined));
      await doomed.waitFor('hanging', 30_000);
      await doomed.kill('SIGKILL');
      await waitFor(
        'every message delivered',
        async () => (await readOutbox(scope.ds, name)).every((r) => r.status === 'delivered'),
        { timeoutMs: 60_000, intervalMs: 100 },
      );
      const arrived = consumer.arrivals.map((a) => a.messageId);
      // Nothing lost; what the killed owner had sent may come again (at least once after a crash).
      expect(new Set(arrived)).toEqual(new Set(ids));
      const order = idOrderByKey(await readOutbox(scope.ds, name));
      for (const key of keys) {
        const seen = consumer.arrivals.filter((a) => a.key === key).map((a) => a.messageId);
        // Per key, first arrivals keep commit order (a redelivery repeats an earlier one).
        const firsts = seen.filter((id, i) => seen.indexOf(id) === i);
        expect(firsts).toEqual(order.get(key));
      }
      await survivor.kill('SIGTERM').catch(() => undefined);
    });
  });
}
