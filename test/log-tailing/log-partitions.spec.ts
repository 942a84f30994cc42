import { randomUUID } from 'node:crypto';
import { ALL_PARTITIONS } from '../../lib/store/shared-sql/delivery-partitions';
import { logTailing, type LogTailingOptions } from 'nestjs-outbox/log-tailing';
import { CapturingLogger } from '../support/capturing-logger';
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
import { describeWith } from '../support/services';
import { postgresLogTables, postgresServerUrl } from '../support/postgres-log-tables';
import { FaultProxy } from '../../lib/testing';
import { waitFor } from '../support/wait-for';
import { DispatcherChild } from '../support/children/spawn-dispatcher';
import { TcpConsumer } from '../support/children/tcp-consumer';

// Log tailing on delivery partitions (`delivery: logTailing()` with `dispatcher.claims:
// 'partitions'`, PostgreSQL, docs/log-tailing.md "On delivery partitions (PostgreSQL)"): the process reading
// the log owns every partition, standbys none; the log wakes the owner, which reads without a
// lease. The delivery promises run on the log in the `sources` project; this is what only this
// combination has: who owns what, and the hand-over when the log changes hands mid-stream.

/** No sweep on a timer during a test: what is delivered, the log's wake-ups brought. */
const NO_SWEEP = 3_600_000;
const server = serverConnection('postgres');

describeWith(['postgres'], 'log tailing on delivery partitions', () => {
  const scope = useOutboxScope(testDatabase('postgres'), { tablePrefix: 'lt_part' });
  const logTables = postgresLogTables(scope);
  const tailedTable = (): Promise<string> => logTables.tailedTable('lt_part');

  function tailingApp(
    table: string,
    publisher: RecordingPublisher,
    log: LogTailingOptions = {},
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
        // The default heartbeat timeout: on a loaded machine a 1 s one lapses now and then, and a
        // lapse mid-publish publishes again (a crash's promise), where these tests assert once.
        dispatcher: { claims: 'partitions', partitionTimeoutMs: 5_000 },
        delivery: logTailing({ sweepIntervalMs: NO_SWEEP, standbyRetryMs: 200, ...log }),
      }),
    });
  }

  /** Per owner, how many partitions the owners table gives it (null: no one). */
  async function owners(table: string): Promise<Map<string | null, number>> {
    const rows: { owner: string | null; n: number }[] = await scope.ds.query(
      `SELECT owner, count(*)::int AS n FROM "${table}_owners" GROUP BY owner`,
    );
    return new Map(rows.map((r) => [r.owner, r.n]));
  }

  /** The owner of every partition, when one process holds them all. */
  async function soleOwner(table: string): Promise<string | undefined> {
    const held = await owners(table);
    const [only] = [...held];
    return held.size === 1 && only?.[0] !== null && only?.[1] === ALL_PARTITIONS.length
      ? (only?.[0] ?? undefined)
      : undefined;
  }

  async function generations(table: string): Promise<Map<number, bigint>> {
    const rows: { partition: number; generation: string }[] = await scope.ds.query(
      `SELECT partition, generation::text AS generation FROM "${table}_owners"`,
    );
    return new Map(rows.map((r) => [r.partition, BigInt(r.generation)]));
  }

  const reading = (h: OutboxApp) => async (): Promise<boolean> =>
    (await h.dispatcher.logLagStatus())?.active === true;

  it('the reader owns every partition and delivers what the log names without leasing a row; a standby owns none and publishes nothing', async () => {
    const table = await tailedTable();
    const readerPublisher = new RecordingPublisher();
    const logs = new CapturingLogger();
    const reader = await tailingApp(
      table,
      readerPublisher,
      {},
      { instanceId: 'reader', logger: logs },
    );
    await waitFor('the reader reading', reading(reader));
    const readerId = await waitFor('every partition held by the reader', () => soleOwner(table));
    expect(readerId).toMatch(/^reader#/);
    expect(logs.lines.map((l) => l.message).join('\n')).toMatch(
      /log tailing \(PostgreSQL logical replication\) on partitions of the key space/,
    );

    const standbyPublisher = new RecordingPublisher();
    const standby = await tailingApp(table, standbyPublisher, {}, { instanceId: 'standby' });
    await waitFor('the standby beating', async () => {
      const rows: { n: number }[] = await scope.ds.query(
        `SELECT count(*)::int AS n FROM "${table}_dispatchers" WHERE label = 'standby'`,
      );
      return rows[0]?.n === 1;
    });
    expect(await reading(standby)()).toBe(false);

    const ids: string[] = [];
    for (let round = 0; round < 5; round++) {
      ids.push(...(await reader.commit(['a', 'b', 'c', 'd'].map((k) => msg(k, { round })))));
    }
    await waitFor(
      'every message delivered',
      () => ids.every((id) => readerPublisher.sentIds.includes(id)),
      {
        timeoutMs: 20_000,
        describeState: () =>
          `${readerPublisher.sentIds.length} published of ${ids.length}; warnings: ${logs.lines
            .filter((l) => l.level === 'warn' || l.level === 'error')
            .map((l) => l.message)
            .join(' | ')}`,
      },
    );
    expect(readerPublisher.sentIds).toHaveLength(ids.length);
    for (const key of ['a', 'b', 'c', 'd']) {
      const committed = ids.filter((_, i) => ['a', 'b', 'c', 'd'][i % 4] === key);
      expect(readerPublisher.sentForKey(key)).toEqual(committed);
    }
    expect(standbyPublisher.sentIds).toEqual([]);
    expect(await soleOwner(table)).toBe(readerId);
    // The last batch's settle may land just after its publish was seen.
    await waitFor('every message settled', async () => {
      const rows: { n: number }[] = await scope.ds.query(
        `SELECT count(*)::int AS n FROM "${table}" WHERE status <> 'delivered'`,
      );
      return rows[0]?.n === 0;
    });
    // Read and settled under the partitions' fence: no row was ever leased.
    const leased: { n: number }[] = await scope.ds.query(
      `SELECT count(*)::int AS n FROM "${table}" WHERE locked_by IS NOT NULL OR locked_until IS NOT NULL`,
    );
    expect(leased[0]?.n).toBe(0);
  });

  it('delivers a row whose id was taken before its transaction wrote anything, committed after later rows were read: the log names it, no sweep needed', async () => {
    const table = await tailedTable();
    const publisher = new RecordingPublisher();
    const app = await tailingApp(table, publisher, {}, { instanceId: 'reader' });
    await waitFor('the reader reading', reading(app));
    await waitFor('every partition held by the reader', () => soleOwner(table));
    // The id is taken (as an INSERT's default takes it) by a transaction that has no transaction
    // id yet, so no snapshot counts it as running (a sequence's nextval assigns none, but for
    // one call in 32): here taken on its own, and its row written by a later transaction.
    const [taken] = await scope.ds.query<{ id: string }[]>(
      `SELECT nextval(pg_get_serial_sequence($1, 'id'))::text AS id`,
      [`"${table}"`],
    );
    // Later rows commit and are delivered: the read floor passes the taken id.
    for (let round = 0; round < 3; round++) {
      const [id] = await app.commit([msg('later', { round })]);
      await waitFor('a later row delivered', () => publisher.sentIds.includes(id as string));
    }
    const messageId = randomUUID();
    await scope.ds.query(
      `INSERT INTO "${table}" (id, message_id, topic, message_key, event_type, payload, headers)
       OVERRIDING SYSTEM VALUE VALUES ($1, $2, 'orders', 'late', 'order.created', '{}', '{}')`,
      [taken?.id, messageId],
    );
    // The table's sweep runs once an hour here: only the log's naming of the row delivers it.
    await waitFor('the late row delivered', () => publisher.sentIds.includes(messageId), {
      timeoutMs: 10_000,
    });
  });

  it("hands over mid-stream when the reader's log connection is cut: the standby takes the slot, then every partition at a higher generation; each message published once, every key in commit order", async () => {
    const table = await tailedTable();
    const link = await FaultProxy.start(
      { host: server.host, port: server.port },
      { lifetimeMs: 120_000 },
    );
    scope.defer(() => link.close());
    const firstPublisher = new RecordingPublisher();
    const firstLogs = new CapturingLogger();
    const secondLogs = new CapturingLogger();
    const warnings = (): string =>
      [
        ...firstLogs.lines.map((l) => ({ ...l, who: 'first' })),
        ...secondLogs.lines.map((l) => ({ ...l, who: 'second' })),
      ]
        .filter((l) => l.level === 'warn' || l.level === 'error')
        .map((l) => `${l.who}: ${l.message}`)
        .join(' | ');
    const first = await tailingApp(
      table,
      firstPublisher,
      { connectionString: postgresServerUrl(link.port), readerTimeoutMs: 2_000 },
      { instanceId: 'first', logger: firstLogs },
    );
    await waitFor('the first reading', reading(first));
    const firstId = await waitFor('every partition held by the first', () => soleOwner(table));
    const secondPublisher = new RecordingPublisher();
    const second = await tailingApp(
      table,
      secondPublisher,
      { readerTimeoutMs: 2_000 },
      { instanceId: 'second', logger: secondLogs },
    );
    const before = await generations(table);

    const keys = ['k0', 'k1', 'k2', 'k3', 'k4'];
    const committed = new Map<string, string[]>(keys.map((k) => [k, []]));
    let writing = true;
    const writer = (async () => {
      for (let round = 0; writing; round++) {
        const ids = await first.commit(keys.map((k) => msg(k, { round })));
        ids.forEach((id, i) => committed.get(keys[i] as string)?.push(id));
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    await waitFor('the first delivering', () => firstPublisher.sentIds.length >= 20, {
      timeoutMs: 20_000,
    });
    link.cut('blackhole');
    await waitFor('the second reading', reading(second), { timeoutMs: 20_000 });
    const secondId = await waitFor(
      'every partition held by the second',
      async () => {
        const owner = await soleOwner(table);
        return owner !== undefined && owner !== firstId ? owner : undefined;
      },
      { timeoutMs: 20_000 },
    );
    expect(secondId).toMatch(/^second#/);
    await waitFor('the second delivering', () => secondPublisher.sentIds.length >= 20, {
      timeoutMs: 20_000,
    });
    writing = false;
    await writer;
    const all = [...committed.values()].flat();
    await waitFor(
      'every message delivered',
      () =>
        all.every(
          (id) => firstPublisher.sentIds.includes(id) || secondPublisher.sentIds.includes(id),
        ),
      {
        timeoutMs: 30_000,
        describeState: () =>
          `${all.filter((id) => !firstPublisher.sentIds.includes(id) && !secondPublisher.sentIds.includes(id)).length} of ${all.length} not delivered; warnings: ${warnings()}`,
      },
    );

    // No crash between: nothing published twice, and each key's messages went out in commit
    // order, the first's share before the second's.
    const published = [...firstPublisher.sentIds, ...secondPublisher.sentIds];
    expect(new Set(published).size).toBe(published.length);
    expect(published).toHaveLength(all.length);
    for (const key of keys) {
      expect([...firstPublisher.sentForKey(key), ...secondPublisher.sentForKey(key)]).toEqual(
        committed.get(key),
      );
    }
    // Every partition changed hands: a settle fenced by the first's generations changes nothing.
    const after = await generations(table);
    for (const [partition, generation] of before) {
      expect(after.get(partition)).toBeGreaterThan(generation);
    }
  });

  it("a SIGKILLed reader whose heartbeat holds a minute is taken over once its slot and owner lock are free: nothing lost, every key's first deliveries in commit order", async () => {
    const consumer = new TcpConsumer();
    await consumer.start();
    scope.defer(() => consumer.stop().catch(() => undefined));
    const table = await tailedTable();
    // Its heartbeat promises a minute: only its freed owner lock lets the standby in within the
    // wait below.
    const doomed = await DispatcherChild.start(
      {
        db: 'postgres',
        table,
        instanceId: 'doomed-reader',
        tcpPort: consumer.port,
        dispatcher: { claims: 'partitions', partitionTimeoutMs: 60_000, batchSize: 20 },
        hangAfter: 25,
        logTailing: { sweepIntervalMs: NO_SWEEP, standbyRetryMs: 200 },
      },
      100_000,
    );
    scope.defer(() => doomed.kill('SIGKILL').catch(() => undefined));
    const doomedId = await waitFor(
      'every partition held by the child',
      async () => {
        const owner = await soleOwner(table);
        return owner?.startsWith('doomed-reader#') === true ? owner : undefined;
      },
      { timeoutMs: 60_000 },
    );
    const survivorPublisher = new RecordingPublisher();
    const survivor = await tailingApp(table, survivorPublisher, {}, { instanceId: 'survivor' });
    const keys = Array.from({ length: 10 }, (_, k) => `key-${k}`);
    const ids: string[] = [];
    for (let tx = 0; tx < 12; tx++)
      ids.push(...(await survivor.commit(keys.map((k) => msg(k, { tx })))));
    await doomed.waitFor('hanging', 30_000);
    expect(survivorPublisher.sentIds).toEqual([]);
    await doomed.kill('SIGKILL');
    await waitFor(
      'every message delivered',
      () => ids.every((id) => survivorPublisher.sentIds.includes(id) || consumer.counts().has(id)),
      {
        timeoutMs: 30_000,
        describeState: () =>
          `${survivorPublisher.sentIds.length} published by the survivor, ${consumer.counts().size} by the child, of ${ids.length}`,
      },
    );
    const survivorId = await soleOwner(table);
    expect(survivorId).toMatch(/^survivor#/);
    expect(survivorId).not.toBe(doomedId);
    // Per key: what the child published first, then the survivor's, in commit order (a message
    // the child sent unsettled may come again from the survivor: at least once after a crash).
    for (const key of keys) {
      const byChild = consumer.arrivals.filter((a) => a.key === key).map((a) => a.messageId);
      const seen = [...byChild, ...survivorPublisher.sentForKey(key)];
      const firsts = seen.filter((id, i) => seen.indexOf(id) === i);
      expect(firsts).toEqual(ids.filter((_, i) => keys[i % keys.length] === key));
    }
  });
});
