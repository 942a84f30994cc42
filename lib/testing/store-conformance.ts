import { randomUUID } from 'node:crypto';
import { createOutboxStore } from '../store/create-outbox-store';
import {
  createOutboxTable,
  outboxDatabase,
  outboxDialectOf,
  outboxTableDropDdl,
  tableNamesFor,
} from '../store/schema/outbox-table-ddl';
import type {
  ClaimedBatch,
  NewOutboxRow,
  OutboxStore,
  Settlement,
} from '../store/ports/outbox-store.port';
import type { SqlPort, SqlRunner } from '../store/ports/sql-port';
import { ATTEMPT_HISTORY_LIMIT } from '../store/shared-sql/attempt-history';
import { IN_FLIGHT_GRACE_MS } from '../store/shared-sql/claim-window';
import type { OutboxPartitioningOptions } from '../options/outbox.options';
import { outboxPartitions } from '../store/partitions/outbox-partitions';
import { messageIdText } from '../store/rows/message-id-codec';
import { OUTBOX_STEP_OPTIONS } from '../store/schema/schema-steps';

/**
 * A SQL port on one database for the store conformance suite: the port under test, and the
 * caller's transactions as the app opens them with the same library (the enqueue path).
 */
export interface StoreConformanceFixture {
  readonly sql: SqlPort;
  /**
   * Runs `work` in a transaction of the app's library: committed when it resolves, rolled back
   * when it throws (the error passed on).
   */
  inTransaction<T>(work: (tx: SqlRunner) => Promise<T>): Promise<T>;
  /** Closes what `setUp` opened. The suite drops its own tables first. */
  tearDown(): Promise<void>;
}

export interface StoreConformanceTarget {
  readonly name: string;
  /**
   * Runs the suite on time-partitioned tables (PostgreSQL, MySQL/MariaDB), as the module's
   * `partitioning` option makes them. @default plain tables
   */
  readonly partitioning?: OutboxPartitioningOptions;
  /** A fresh fixture per case. The suite creates (and drops) an outbox table of its own. */
  setUp(): Promise<StoreConformanceFixture>;
  /**
   * Makes the suite's table (with its attempt history) instead of `createOutboxTable`: e.g. a
   * table as an earlier version made it, to prove the store still runs on it.
   * @default createOutboxTable
   */
  createTable?(sql: SqlPort, tableName: string): Promise<void>;
}

/** One case of the suite: throws an `Error` saying what broke the contract. */
export interface StoreConformanceCase {
  readonly name: string;
  run(target: StoreConformanceTarget): Promise<void>;
}

/** A row of the table as the suite reads it back. */
interface TableRow {
  readonly id: string;
  readonly messageId: string;
  readonly status: string;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly lockedBy: string | null;
}

/** A row of the attempt history as the suite reads it back. */
interface AttemptRow {
  readonly messageId: string;
  readonly attempt: number;
  readonly outcome: string;
  readonly lockedBy: string | null;
  readonly errorClass: string | null;
  readonly error: string | null;
}

/** What a case works with: the store over the port, on a table of its own. */
interface Context {
  readonly store: OutboxStore;
  readonly owner: string;
  readonly claim: (limit: number, leaseMs?: number) => Promise<ClaimedBatch>;
  /** Inserts in one committed transaction of the app's library. */
  readonly enqueue: (rows: readonly NewOutboxRow[]) => Promise<readonly string[]>;
  readonly rows: () => Promise<TableRow[]>;
  readonly row: (id: string) => Promise<TableRow>;
  /** The attempt history, in the order it was written. */
  readonly attempts: () => Promise<AttemptRow[]>;
  readonly fixture: StoreConformanceFixture;
}

/**
 * Compares by JSON, not by `node:assert`'s deep equality: that checks prototypes, and a test
 * runner's sandbox (jest's) hands over arrays of another realm.
 */
function same(actual: unknown, expected: unknown, what = 'value'): void {
  const [a, e] = [JSON.stringify(actual), JSON.stringify(expected)];
  if (a !== e) throw new Error(`store conformance: ${what} is ${a}, expected ${e}`);
}

function ok(condition: boolean, message: string): asserts condition {
  if (!condition) throw new Error(`store conformance: ${message}`);
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const ids = (batch: ClaimedBatch): string[] => batch.records.map((r) => r.id);
const NONE: Settlement = { delivered: [], retry: [], dead: [], release: [], advancedKeys: [] };

function message(key: string | null, options: { delayMs?: number; messageId?: string } = {}) {
  return {
    messageId: options.messageId ?? randomUUID(),
    idempotent: options.messageId !== undefined,
    topic: 'conformance',
    key,
    type: 'Tested',
    payload: JSON.stringify({ key }),
    headers: '{}',
    availableAt: null,
    delayMs: options.delayMs ?? null,
  } satisfies NewOutboxRow;
}

/**
 * Runs `work` on a store over the target's port, with ordering by key on (runs of up to
 * `maxRun` messages of a key), then cleans up.
 */
async function withStore(
  target: StoreConformanceTarget,
  work: (context: Context) => Promise<void>,
  maxRun = 1,
): Promise<void> {
  const fixture = await target.setUp();
  const tableName = `outbox_conf_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
  const dialect = outboxDialectOf(fixture.sql.databaseType);
  const names = tableNamesFor(dialect, { tableName });
  let store: OutboxStore | undefined;
  try {
    if (target.createTable !== undefined) await target.createTable(fixture.sql, tableName);
    else
      await createOutboxTable(fixture.sql, {
        tableName,
        partitioning: target.partitioning,
        with: OUTBOX_STEP_OPTIONS,
      });
    if (target.partitioning !== undefined) {
      const { layout } = await outboxPartitions(fixture.sql, { tableName }).status(
        { premake: 1, retentionMs: 86_400_000, deadRetentionMs: null },
        false,
      );
      same(layout, { kind: 'partitioned', interval: target.partitioning.interval }, 'table layout');
    }
    const opened = await createOutboxStore(
      fixture.sql,
      {
        tableName,
        schema: null,
        ordering: { enabled: true, onDeadLetter: 'block', maxRun },
        dispatcher: { dbTimeoutMs: 10_000 },
        partitioning:
          target.partitioning === undefined
            ? null
            : { interval: target.partitioning.interval, premake: 1 },
      },
      { enabled: true, notify: false },
    );
    store = opened;
    const owner = `conformance-${target.name}`;
    const rows = async (): Promise<TableRow[]> => {
      const { rows: raw } = await fixture.sql.query<Record<string, unknown>>(
        `SELECT id, message_id, status, attempts, last_error, locked_by FROM ${names.table} ORDER BY id`,
      );
      return raw.map((r) => ({
        id: String(r.id),
        messageId: messageIdText(r.message_id),
        status: String(r.status),
        attempts: Number(r.attempts),
        lastError: typeof r.last_error === 'string' ? r.last_error : null,
        lockedBy: typeof r.locked_by === 'string' ? r.locked_by : null,
      }));
    };
    const attempts = async (): Promise<AttemptRow[]> => {
      const { rows: raw } = await fixture.sql.query<Record<string, unknown>>(
        `SELECT message_id, attempt, outcome, locked_by, error_class, error FROM ${names.attemptsTable} ORDER BY id`,
      );
      const text = (v: unknown): string | null => (typeof v === 'string' ? v : null);
      return raw.map((r) => ({
        messageId: messageIdText(r.message_id),
        attempt: Number(r.attempt),
        outcome: String(r.outcome),
        lockedBy: text(r.locked_by),
        errorClass: text(r.error_class),
        error: text(r.error),
      }));
    };
    await work({
      store: opened,
      owner,
      fixture,
      attempts,
      claim: (limit, leaseMs = 60_000) => opened.claim({ limit, owner, leaseMs }),
      enqueue: (list) => fixture.inTransaction((tx) => opened.insert(tx, list, true)),
      rows,
      row: async (id) => {
        const found = (await rows()).find((r) => r.id === id);
        ok(found !== undefined, `row ${id} is gone`);
        return found;
      },
    });
  } finally {
    await store?.close();
    for (const statement of outboxTableDropDdl(dialect, { tableName })) {
      await fixture.sql.query(statement).catch(() => undefined);
    }
    await fixture.tearDown();
  }
}

/**
 * The ids of `claimed` that belong to `queue` (one key's rows in queue order) must be a run: the
 * first `from` rows of the queue skipped, then 1 to `maxRun` rows with no gap.
 */
function sameRun(
  claimed: ClaimedBatch,
  queue: readonly string[],
  from: number,
  maxRun: number,
): number {
  const taken = ids(claimed).filter((id) => queue.includes(id));
  taken.sort((a, b) => queue.indexOf(a) - queue.indexOf(b));
  ok(
    taken.length >= 1 && taken.length <= maxRun,
    `a run of 1 to ${maxRun} messages was expected, got ${taken.length}`,
  );
  same(taken, queue.slice(from, from + taken.length), 'the run (from the head, no gap)');
  return taken.length;
}

const CASES: readonly {
  name: string;
  /** `ordering.maxRun` of the case's store. @default 1 */
  maxRun?: number;
  run(context: Context): Promise<void>;
}[] = [
  {
    name: 'releaseClaim gives back, with their attempt, the rows a claim leased with its token, and nothing else',
    async run({ store, claim, enqueue, owner, row }) {
      await enqueue([message('a'), message('b'), message('c')]);
      const token = randomUUID();
      const lost = await store.claim({ limit: 2, owner, leaseMs: 60_000, token });
      same(lost.token, token, 'the token of a claim given one');
      same(lost.records.length, 2, 'rows claimed');
      const kept = await claim(1);
      same(kept.records.length, 1, 'rows of the second claim');
      same(await store.releaseClaim(token), 2, 'rows released');
      for (const id of ids(lost)) {
        const r = await row(id);
        same([r.status, r.attempts, r.lockedBy], ['pending', 0, null], `released row ${id}`);
      }
      const other = await row(ids(kept)[0] ?? '');
      same([other.attempts, other.lockedBy], [1, owner], 'the other claim’s row');
      same(await store.releaseClaim(token), 0, 'a second release of the same claim');
      await store.settle(kept.token, { ...NONE, delivered: ids(kept) }, false);
      same(await store.releaseClaim(kept.token), 0, 'a release of a settled claim');
      same((await row(ids(kept)[0] ?? '')).status, 'delivered', 'the settled row');
      const again = await claim(5);
      same(ids(again).sort(), ids(lost).sort(), 'the released rows, claimable at once');
    },
  },
  {
    name: 'renewLease moves the lease of the rows still holding the token and pending, and no other, to a new token if given',
    async run({ store, claim, enqueue, owner, row }) {
      const renew = store.renewLease?.bind(store);
      ok(renew !== undefined, 'the store offers renewLease');
      await enqueue([message('a'), message('b'), message('c')]);
      const leased = await claim(2, 1_000);
      const other = await claim(1);
      same(leased.records.length, 2, 'rows claimed');
      same(await renew(ids(leased), leased.token, 60_000), 2, 'rows renewed');
      // Past the claim's own lease: renewed, the rows are neither expired nor claimable.
      await sleep(1_300);
      same(await store.releaseExpired(), 0, 'expired leases cleared after the renewal');
      same((await claim(5)).records.length, 0, 'rows a claim takes after the renewal');
      for (const id of ids(leased)) {
        const r = await row(id);
        same([r.status, r.attempts, r.lockedBy], ['pending', 1, owner], `renewed row ${id}`);
      }
      // Fenced: another token renews nothing, and a row of another batch is not renewed.
      same(await renew(ids(leased), randomUUID(), 60_000), 0, 'rows renewed with another token');
      same(
        await renew([...ids(leased), ...ids(other)], leased.token, 60_000),
        2,
        'rows renewed with ids of another batch among them',
      );
      // With a new token the rows move to it: the old one renews and settles nothing more.
      const moved = randomUUID();
      same(await renew(ids(leased), leased.token, 60_000, moved), 2, 'rows moved to a new token');
      same(await renew(ids(leased), leased.token, 60_000), 0, 'rows renewed with the old token');
      same((await claim(5)).records.length, 0, 'rows a claim takes after the move');
      same(
        await store.settle(leased.token, { ...NONE, delivered: ids(leased) }, false),
        0,
        'rows settled with the old token',
      );
      // A settled row is not pending any more.
      await store.settle(moved, { ...NONE, delivered: ids(leased) }, false);
      same(await renew(ids(leased), moved, 60_000), 0, 'settled rows renewed');
    },
  },
  {
    name: 'hasDue answers whether a claim would find a due message: not for scheduled, leased or waiting ones',
    async run({ store, claim, enqueue }) {
      ok(store.hasDue !== undefined, 'the store offers hasDue');
      same(await store.hasDue(), false, 'hasDue of an empty table');
      await enqueue([message('later', { delayMs: 3_600_000 })]);
      same(await store.hasDue(), false, 'hasDue with only a scheduled message');
      await enqueue([message('k'), message('k')]);
      same(await store.hasDue(), true, 'hasDue with due messages');
      // The head leased, its follower parked: nothing left that a claim could take.
      const batch = await claim(1);
      await store.park([...batch.blockedKeys, 'k']);
      same(await store.hasDue(), false, 'hasDue with the due messages leased or waiting');
    },
  },
  {
    name: 'stores and claims binary payloads and broker attributes as given, alone and among JSON rows',
    async run({ claim, enqueue }) {
      // Bytes no text round trip keeps: NUL, 0xFF, a cut UTF-8 sequence.
      const bytes = Buffer.from([0x00, 0xff, 0xfe, 0xc3, 0x00, 0x80, 0x41]);
      const binary = (key: string, attributes?: string): NewOutboxRow => ({
        ...message(key),
        payload: 'null',
        binary: { bytes, contentType: 'application/avro' },
        ...(attributes === undefined ? {} : { attributes }),
      });
      const attributes = '{"rabbitmq":{"priority":7},"kafka":{"partition":1}}';
      // One row (the one-row statements), then several with a JSON row among them.
      await enqueue([binary('b1', attributes)]);
      await enqueue([binary('b2'), message('j1'), { ...message('j2'), attributes }]);
      const records = (await claim(10)).records;
      same(
        records.map((r) => [
          r.key,
          r.encoding ?? 'json',
          r.contentType ?? null,
          typeof r.payload === 'string' ? r.payload : r.payload.toString('base64'),
          r.attributes ?? null,
        ]),
        [
          ['b1', 'binary', 'application/avro', bytes.toString('base64'), JSON.parse(attributes)],
          ['b2', 'binary', 'application/avro', bytes.toString('base64'), null],
          ['j1', 'json', null, '{"key":"j1"}', null],
          ['j2', 'json', null, '{"key":"j2"}', JSON.parse(attributes)],
        ],
        'claimed binary and attributed records',
      );
      ok(
        records.every((r) => r.encoding !== 'binary' || Buffer.isBuffer(r.payload)),
        'a binary record carries its bytes as a Buffer',
      );
    },
  },
  {
    name: 'claims due, unleased rows, at most the batch size, oldest first',
    async run({ claim, enqueue, rows }) {
      // One statement for the batch: a delay on one row means a delay (0 here) on every row.
      await enqueue([
        message(null, { delayMs: 0 }),
        message(null, { delayMs: 0 }),
        message(null, { delayMs: 0 }),
        message(null, { delayMs: 0 }),
        message(null, { delayMs: 3_600_000 }),
      ]);
      const all = await rows();
      const first = await claim(3);
      same(
        ids(first),
        all.slice(0, 3).map((r) => r.id),
      );
      ok(
        first.records.every((r) => r.attempts === 1),
        'a claim counts one attempt',
      );
      // Every driver answers the creation time in a form of its own (a Date, text, a number):
      // each must come out as the time the row was written (within a day: the database's clock
      // may not be this process's), and its age as a count, not NaN.
      ok(
        first.records.every(
          (r) =>
            Math.abs(r.createdAt.getTime() - Date.now()) < 86_400_000 &&
            Number.isFinite(r.ageMs) &&
            r.ageMs >= 0,
        ),
        `a claimed record carries its creation time and age (got ${JSON.stringify(first.records.map((r) => [r.createdAt, r.ageMs]))})`,
      );
      // The leased three are not claimed again, and the delayed one is not due.
      same(ids(await claim(10)), [all[3]?.id]);
      same((await claim(10)).records, []);
      same(
        (await rows()).map((r) => r.attempts),
        [1, 1, 1, 1, 0],
      );
    },
  },
  {
    name: 'a message whose lease has ended is due and claimable again, without the unlocker, a key from its head',
    async run({ store, claim, enqueue, rows }) {
      // The lease is on the database's clock: each wait polls there, never for a fixed time.
      const eventually = async (done: () => Promise<boolean>, what: string): Promise<void> => {
        for (let waited = 0; !(await done()); waited += 50) {
          ok(waited < 10_000, `${what} within 10 s`);
          await sleep(50);
        }
      };
      await enqueue([message(null)]);
      const [lone] = await rows();
      same(ids(await claim(1, 300)), [lone?.id], 'the first claim of a message without a key');
      same(await store.hasDue?.(), false, 'hasDue while its lease runs');
      await eventually(
        async () => (await store.hasDue?.()) === true,
        'the ended lease made it due',
      );
      const retaken = await claim(1);
      same(ids(retaken), [lone?.id], 'the claim after its lease ended');
      same(retaken.records[0]?.attempts, 2, 'its attempts');
      // A key's head whose lease ended comes back before its follower, which was due all along.
      await enqueue([message('k'), message('k')]);
      const head = (await rows()).find((r) => r.id !== lone?.id);
      same(ids(await claim(2, 300)), [head?.id], 'the first claim of the key: its head alone');
      let again: ClaimedBatch = await claim(2);
      same(again.records, [], 'a claim while the head is leased');
      await eventually(async () => {
        again = await claim(2);
        return again.records.length > 0;
      }, 'the head claimable again');
      same(
        ids(again),
        [head?.id],
        'the claim after the lease of the head ended: the head, not its follower',
      );
    },
  },
  {
    name: 'reads due rows no further than the window it is given',
    async run({ store, owner, claim, enqueue }) {
      await enqueue([message('k'), message('k'), message('k'), message('k'), message('b')]);
      same(
        (await claim(1)).records.map((r) => r.key),
        ['k'],
        'the head of k, leased by the first claim',
      );
      // k's three followers, held back behind its head in flight, fill a window of three:
      // b's message is the fourth due row.
      const narrow = await store.claim({ limit: 2, owner, leaseMs: 60_000, window: 3 });
      same(narrow.records.length, 0, 'rows claimed through a window of three');
      const wider = await store.claim({ limit: 2, owner, leaseMs: 60_000, window: 4 });
      same(
        wider.records.map((r) => r.key),
        ['b'],
        'the rows claimed through a window of four',
      );
    },
  },
  {
    name: 'with ordering on and runs of one, only the head of a key is claimable; park and promote move it on',
    async run({ store, claim, enqueue, rows, row }) {
      await enqueue([message('k'), message('k'), message('k'), message('other')]);
      const [k1, k2, k3, other] = (await rows()).map((r) => r.id) as [
        string,
        string,
        string,
        string,
      ];
      const batch = await claim(10);
      same(ids(batch).sort(), [k1, other].sort());
      // k's head is in this batch: its followers are in flight's to free, not parking's.
      same([batch.blockedKeys, batch.inFlightKeys], [[], 1], 'keys held back');
      same(await store.park(['k']), 2);
      same(
        (await rows()).map((r) => r.status),
        ['pending', 'waiting', 'waiting', 'pending'],
      );
      // The head delivered: the next message of the key, and only it, becomes claimable.
      const settled = await store.settle(
        batch.token,
        { ...NONE, delivered: ids(batch), advancedKeys: ['k'] },
        false,
      );
      same(settled, 2);
      same(ids(await claim(10)), [k2]);
      same((await row(k3)).status, 'waiting');
    },
  },
  {
    name: 'with runs, a key gives a claim its messages from the head in queue order, never past one that is not in the batch',
    maxRun: 3,
    async run({ store, claim, enqueue, rows }) {
      // A store may take fewer than maxRun (at least the head): runs are checked as prefixes.
      await enqueue([message('k'), message('k'), message('k'), message('k'), message('k')]);
      await enqueue([message('other')]);
      const all = (await rows()).map((r) => r.id);
      const queue = all.slice(0, 5);
      const first = await claim(10);
      const taken = sameRun(first, queue, 0, 3);
      ok(ids(first).includes(all[5] ?? ''), 'the other key is claimed beside the run');
      same([first.blockedKeys, first.inFlightKeys], [[], 1], 'keys held back');
      // The run in flight holds the key: nothing more of it is claimable.
      same(
        ids(await claim(10)).filter((id) => queue.includes(id)),
        [],
      );
      await store.park(['k']);
      same(
        (await rows()).slice(0, 5).map((r) => r.status),
        queue.map((_, i) => (i < taken ? 'pending' : 'waiting')),
      );
      // Delivered: the next messages of the key become claimable together, from where the run ended.
      await store.settle(
        first.token,
        { ...NONE, delivered: ids(first), advancedKeys: ['k', 'other'] },
        false,
      );
      const second = await claim(10);
      const next = sameRun(second, queue, taken, 3);
      // A run that fails part way: the failed message retries later, the rest of the run goes
      // back, and nothing of the key is claimable until the failed one is due.
      if (next > 1) {
        const [failed, ...rest] = ids(second).sort(
          (a, b) => queue.indexOf(a) - queue.indexOf(b),
        ) as [string, ...string[]];
        await store.settle(
          second.token,
          {
            ...NONE,
            retry: [{ id: failed, delayMs: 3_600_000, error: 'refused', errorClass: 'Error' }],
            release: rest.map((id) => ({ id, delayMs: 0, error: null, errorClass: null })),
          },
          false,
        );
        same(ids(await claim(10)), []);
      }
    },
  },
  {
    name: 'with runs, a key whose head is not due gives a claim nothing, and a claim of one takes only a head',
    maxRun: 3,
    async run({ claim, enqueue, rows }) {
      // k first: a claim may look at no more of the window's keys than it may take rows, so a
      // claim of one behind a blocked key may take nothing and only report that key.
      await enqueue([message('k'), message('k'), message('k')]);
      await enqueue([
        message('late', { delayMs: 3_600_000 }),
        message('late', { delayMs: 0 }),
        message('late', { delayMs: 0 }),
      ]);
      const all = (await rows()).map((r) => r.id);
      const batch = await claim(1);
      same(ids(batch), [all[0]]);
      const rest = await claim(10);
      same(ids(rest), []);
      // k's head is in flight (just leased): its followers are counted, not reported for parking.
      same(rest.blockedKeys, ['late']);
      same(rest.inFlightKeys, 1);
    },
  },
  {
    name: 'a key with one due message, behind one that is scheduled or in flight, gives a claim nothing of it',
    async run({ claim, enqueue, rows }) {
      // One row of each key in the window, its earlier message outside it: a store may answer
      // such a key by asking only what comes before that row, and must still hold it back.
      await enqueue([message('k', { delayMs: 3_600_000 }), message('k')]);
      await enqueue([message('m'), message('m')]);
      const [, , m1] = (await rows()).map((r) => r.id);
      const first = await claim(10);
      same(
        [ids(first), first.blockedKeys, first.inFlightKeys],
        [[m1], ['k'], 1],
        'the scheduled head holds its key; the other key gives its head',
      );
      const second = await claim(10);
      same(
        [ids(second), second.blockedKeys, second.inFlightKeys],
        [[], ['k'], 1],
        "the other key's second message, alone in the window behind its head in flight",
      );
    },
  },
  {
    name: 'a key whose head is in flight is counted, not reported blocked, until its claim is older than the in-flight grace',
    async run({ claim, enqueue }) {
      await enqueue([message('k'), message('k'), message('k')]);
      const first = await claim(1, 60_000);
      same(
        [first.records.length, first.blockedKeys, first.inFlightKeys],
        [1, [], 1],
        'the head claimed',
      );
      const early = await claim(10);
      same(
        [ids(early), early.blockedKeys, early.inFlightKeys],
        [[], [], 1],
        'right after the claim',
      );
      // Still leased, but for longer than a healthy batch takes: a slow publish, whose followers
      // are parked like a stuck key's so that they do not hold up the keys behind them.
      await sleep(IN_FLIGHT_GRACE_MS + 100);
      const late = await claim(10);
      same([ids(late), late.blockedKeys, late.inFlightKeys], [[], ['k'], 0], 'after the grace');
    },
  },
  {
    name: "a head handed back behind its key's followers, out of the window, has them reported blocked, not in flight",
    async run({ store, claim, enqueue }) {
      // More followers than a claim of one looks at (its window), then the head goes back:
      // due again, but after them in due order, so that the next window holds only followers.
      await enqueue(Array.from({ length: 60 }, () => message('k')));
      const first = await claim(1);
      const [head] = ids(first) as [string];
      // Due again strictly after the followers (SQLite keeps milliseconds).
      await sleep(5);
      await store.settle(
        first.token,
        { ...NONE, release: [{ id: head, delayMs: 0, error: null, errorClass: null }] },
        false,
      );
      const behind = await claim(1);
      same(
        [ids(behind), behind.blockedKeys, behind.inFlightKeys],
        [[], ['k'], 0],
        'a claim whose window holds only the followers',
      );
      // Parked, they are out of the way: the head is claimed next.
      await store.park(['k']);
      same(ids(await claim(1)), [head], 'the head, claimed after the park');
    },
  },
  {
    name: 'settles delivered, retry and dead with the lease token',
    async run({ store, claim, enqueue, row }) {
      await enqueue([message(null), message(null), message(null)]);
      const batch = await claim(3);
      const [a, b, c] = ids(batch) as [string, string, string];
      const changed = await store.settle(
        batch.token,
        {
          ...NONE,
          delivered: [a],
          retry: [{ id: b, delayMs: 0, error: 'try again', errorClass: 'Error' }],
          dead: [{ id: c, error: 'gave up', errorClass: 'PermanentPublishError' }],
        },
        false,
      );
      same(changed, 3);
      const [ra, rb, rc] = [await row(a), await row(b), await row(c)];
      same([ra.status, ra.lockedBy], ['delivered', null]);
      same([rb.status, rb.attempts, rb.lastError, rb.lockedBy], ['pending', 1, 'try again', null]);
      same([rc.status, rc.lastError], ['dead', 'gave up']);
      // The retried one is due again (delay 0); the others are done.
      same(ids(await claim(10)), [b]);
    },
  },
  {
    name: 'fences: a stale lease token settles nothing and records no attempt',
    async run({ store, claim, enqueue, row, owner, attempts }) {
      await enqueue([message(null)]);
      const stale = await claim(1, 50);
      await sleep(200);
      same(await store.releaseExpired(), 1);
      const fresh = await claim(1);
      same(ids(fresh), ids(stale));
      const [id] = ids(stale) as [string];
      for (const outcome of [
        { ...NONE, delivered: [id] },
        { ...NONE, retry: [{ id, delayMs: 0, error: 'x', errorClass: 'Error' }] },
        { ...NONE, dead: [{ id, error: 'x', errorClass: 'Error' }] },
        { ...NONE, release: [{ id, delayMs: 0, error: null, errorClass: null }] },
        { ...NONE, release: [{ id, delayMs: 0, error: 'x', errorClass: 'Error' }] },
      ]) {
        same(await store.settle(stale.token, outcome, false), 0);
      }
      same(await attempts(), [], 'attempt history after stale settles');
      same([(await row(id)).status, (await row(id)).lockedBy], ['pending', owner]);
      // A token nobody holds changes nothing either.
      same(await store.settle(randomUUID(), { ...NONE, delivered: [id] }, false), 0);
      same(await store.settle(fresh.token, { ...NONE, delivered: [id] }, false), 1);
      same((await row(id)).status, 'delivered');
    },
  },
  {
    name: "fences the promotion too: a stale settle leaves a key's parked followers waiting",
    async run({ store, claim, enqueue, rows, row }) {
      await enqueue([message('k'), message('k')]);
      const [head, follower] = (await rows()).map((r) => r.id) as [string, string];
      const stale = await claim(10, 50);
      same(ids(stale), [head]);
      same(await store.park(['k']), 1);
      await sleep(200);
      same(await store.releaseExpired(), 1);
      // The head is still in the queue: its follower must not become claimable beside it.
      const delivered = { ...NONE, delivered: [head], advancedKeys: ['k'] };
      same(await store.settle(stale.token, delivered, false), 0);
      same((await row(follower)).status, 'waiting');
      const fresh = await claim(10);
      same(ids(fresh), [head]);
      // Deleting the delivered head advances its key as marking it does.
      same(await store.settle(fresh.token, delivered, true), 1);
      same(ids(await claim(10)), [follower]);
    },
  },
  {
    name: 'records each failed attempt with its outcome, owner and error; a delivery records none',
    async run({ store, claim, enqueue, row, owner, attempts }) {
      await enqueue([message(null), message(null)]);
      const first = await claim(2);
      const [a, b] = ids(first) as [string, string];
      const mb = (await row(b)).messageId;
      await store.settle(
        first.token,
        {
          ...NONE,
          delivered: [a],
          retry: [{ id: b, delayMs: 0, error: 'Error: try again', errorClass: 'Error' }],
        },
        false,
      );
      const outage = await claim(1);
      const err = 'PublisherUnavailableError: connection refused';
      await store.settle(
        outage.token,
        {
          ...NONE,
          release: [{ id: b, delayMs: 0, error: err, errorClass: 'PublisherUnavailableError' }],
        },
        false,
      );
      // A release without an error (shutdown, a lapsed lease) is not a failed attempt.
      const quiet = await claim(1);
      await store.settle(
        quiet.token,
        { ...NONE, release: [{ id: b, delayMs: 0, error: null, errorClass: null }] },
        false,
      );
      const last = await claim(1);
      await store.settle(
        last.token,
        {
          ...NONE,
          dead: [
            { id: b, error: 'PermanentPublishError: no', errorClass: 'PermanentPublishError' },
          ],
        },
        false,
      );
      same((await row(b)).attempts, 2, 'attempts of the dead message');
      same(
        (await attempts()).map((h) => [
          h.messageId,
          h.attempt,
          h.outcome,
          h.lockedBy,
          h.errorClass,
          h.error,
        ]),
        [
          [mb, 1, 'retry', owner, 'Error', 'Error: try again'],
          [mb, 2, 'outage', owner, 'PublisherUnavailableError', err],
          [mb, 2, 'dead', owner, 'PermanentPublishError', 'PermanentPublishError: no'],
        ],
        'attempt history',
      );
    },
  },
  {
    name: 'deletes the history with its message (purge, deleteDead, deleting delivered rows); a requeue keeps it',
    async run({ store, claim, enqueue, row, attempts }) {
      await enqueue([message(null), message(null), message(null), message(null)]);
      const failed = await claim(4);
      const [a, b, c, d] = ids(failed) as [string, string, string, string];
      const [ma, mb, mc, md] = [
        (await row(a)).messageId,
        (await row(b)).messageId,
        (await row(c)).messageId,
        (await row(d)).messageId,
      ];
      const bad = { error: 'Error: bad', errorClass: 'Error' };
      await store.settle(
        failed.token,
        {
          ...NONE,
          retry: [
            { id: a, delayMs: 0, ...bad },
            { id: b, delayMs: 0, ...bad },
          ],
          dead: [
            { id: c, ...bad },
            { id: d, ...bad },
          ],
        },
        false,
      );
      const by = async (): Promise<string[]> => (await attempts()).map((h) => h.messageId).sort();
      same(await by(), [ma, mb, mc, md].sort());
      // a delivered and deleted at once (retention 0), b delivered and kept.
      const again = await claim(2);
      same(ids(again), [a, b]);
      await store.settle(again.token, { ...NONE, delivered: [a] }, true);
      await store.settle(again.token, { ...NONE, delivered: [b] }, false);
      same(await by(), [mb, mc, md].sort(), 'history after deleting a delivered row');
      same(await store.deleteDead([mc]), 1);
      same(await by(), [mb, md].sort(), 'history after deleteDead');
      same(await store.requeueDead([md]), { requeued: 1, resequenced: 0 });
      same(await by(), [mb, md].sort(), 'history after a requeue');
      await sleep(20);
      same(await store.purge('delivered', 0, 10), 1);
      same(await by(), [md], 'history after purging delivered rows');
      const dead = await claim(1);
      await store.settle(dead.token, { ...NONE, dead: [{ id: d, ...bad }] }, false);
      same(
        (await attempts()).map((h) => [h.messageId, h.attempt, h.outcome]),
        [
          [md, 1, 'dead'],
          [md, 1, 'dead'],
        ],
      );
      await sleep(20);
      same(await store.purge('dead', 0, 10), 1);
      same(await attempts(), [], 'history after purging dead rows');
    },
  },
  {
    name: `keeps the latest ${ATTEMPT_HISTORY_LIMIT} attempts of a message`,
    async run({ store, claim, enqueue, attempts }) {
      await enqueue([message(null)]);
      const total = ATTEMPT_HISTORY_LIMIT + 3;
      for (let i = 1; i <= total; i++) {
        const batch = await claim(1);
        const [id] = ids(batch) as [string];
        await store.settle(
          batch.token,
          { ...NONE, retry: [{ id, delayMs: 0, error: `Error: ${i}`, errorClass: 'Error' }] },
          false,
        );
      }
      const kept = await attempts();
      same(kept.length, ATTEMPT_HISTORY_LIMIT, 'history rows kept');
      same(
        kept.map((h) => h.attempt),
        Array.from(
          { length: ATTEMPT_HISTORY_LIMIT },
          (_, i) => total - ATTEMPT_HISTORY_LIMIT + 1 + i,
        ),
        'attempts kept',
      );
    },
  },
  {
    name: 'requeues dead messages, all or by message id, with attempts reset',
    async run({ store, claim, enqueue, row }) {
      await enqueue([message(null), message(null)]);
      const batch = await claim(2);
      const [a, b] = ids(batch) as [string, string];
      const dead = [a, b].map((id) => ({ id, error: 'bad', errorClass: 'Error' }));
      await store.settle(batch.token, { ...NONE, dead }, false);
      const b0 = await row(b);
      same(await store.requeueDead([b0.messageId]), { requeued: 1, resequenced: 0 });
      same([(await row(b)).status, (await row(b)).attempts], ['pending', 0]);
      same((await row(a)).status, 'dead');
      same(await store.requeueDead(), { requeued: 1, resequenced: 0 });
      same(ids(await claim(10)), [a, b]);
    },
  },
  {
    name: 'purges delivered and dead rows older than asked, up to the limit',
    async run({ store, claim, enqueue, rows }) {
      await enqueue([message(null), message(null), message(null), message(null)]);
      const batch = await claim(4);
      const [a, b, c, d] = ids(batch) as [string, string, string, string];
      await store.settle(
        batch.token,
        { ...NONE, delivered: [a, b], dead: [{ id: c, error: 'bad', errorClass: 'Error' }] },
        false,
      );
      same(await store.purge('delivered', 3_600_000, 10), 0);
      await sleep(50);
      same(await store.purge('delivered', 0, 1), 1);
      same(await store.purge('delivered', 0, 10), 1);
      same(await store.purge('dead', 0, 10), 1);
      same(
        (await rows()).map((r) => r.id),
        [d],
      );
    },
  },
  {
    name: 'never gives one row to two concurrent claimers',
    async run({ claim, enqueue }) {
      const total = 60;
      await enqueue(Array.from({ length: total }, () => message(null)));
      const seen: string[] = [];
      for (;;) {
        const got = (await Promise.all([claim(7), claim(7), claim(7)])).flatMap(ids);
        if (got.length === 0) break;
        seen.push(...got);
      }
      same(seen.length, total);
      same(new Set(seen).size, total, 'distinct rows claimed');
    },
  },
  {
    name: "writes nothing when the caller's transaction rolls back",
    async run({ store, fixture, enqueue, rows }) {
      const failure = new Error('business rule broken after the enqueue');
      let thrown: unknown;
      try {
        await fixture.inTransaction(async (tx) => {
          await store.insert(tx, [message('k'), message(null)], true);
          throw failure;
        });
      } catch (error) {
        thrown = error;
      }
      ok(thrown === failure, 'inTransaction must pass the error on');
      same(await rows(), []);
      // The key's lock went with the transaction: a later writer of the key is not held up.
      await enqueue([message('k')]);
      same((await rows()).length, 1);
    },
  },
  {
    name: "the port's own transaction commits what its work wrote, or nothing when the work throws",
    async run({ store, fixture, rows }) {
      const failure = new Error('the outbox work failed after a write');
      let thrown: unknown;
      try {
        await fixture.sql.transaction(async (tx) => {
          await store.insert(tx, [message('k'), message(null)], true);
          throw failure;
        });
      } catch (error) {
        thrown = error;
      }
      ok(thrown === failure, 'transaction must pass the error on');
      same(await rows(), []);
      const value = await fixture.sql.transaction(async (tx) => {
        await store.insert(tx, [message('k')], true);
        return 'committed';
      });
      same(value, 'committed');
      same((await rows()).length, 1);
    },
  },
  {
    name: 'an idempotent insert writes a message id once and reports the ones already there',
    async run({ enqueue, rows }) {
      const first = message('k', { messageId: randomUUID() });
      same(await enqueue([first]), []);
      const second = message('k', { messageId: randomUUID() });
      same(await enqueue([first, second]), [first.messageId]);
      same(
        (await rows()).map((r) => r.messageId),
        [first.messageId, second.messageId],
      );
    },
  },
  {
    name: 'a message id deleted with its row may be enqueued again; concurrent writers of one id write it once',
    async run({ store, claim, enqueue, rows, fixture }) {
      const dead = message('k', { messageId: randomUUID() });
      await enqueue([dead]);
      const batch = await claim(1);
      same(
        await store.settle(
          batch.token,
          { ...NONE, dead: [{ id: ids(batch)[0] ?? '', error: 'x', errorClass: 'Error' }] },
          false,
        ),
        1,
      );
      same(await store.deleteDead([dead.messageId]), 1);
      same(await enqueue([dead]), []);
      same(
        (await rows()).map((r) => r.messageId),
        [dead.messageId],
      );
      // Two transactions enqueue one id at once: the second waits for the first and skips it.
      // SQLite has one writer at a time (a port over one connection cannot even begin the
      // second transaction): there the second follows the first, as SQLite would order them.
      const shared = message(null, { messageId: randomUUID() });
      const overlap = !outboxDatabase(fixture.sql.databaseType).singleWriter;
      let release: () => void = () => undefined;
      const held = new Promise<void>((resolve) => (release = resolve));
      const first = fixture.inTransaction(async (tx) => {
        const skipped = await store.insert(tx, [shared], true);
        if (overlap) await held;
        return skipped;
      });
      if (!overlap) await first;
      else await sleep(100);
      const second = fixture.inTransaction((tx) => store.insert(tx, [shared], true));
      await sleep(overlap ? 200 : 0);
      release();
      const answers = await Promise.all([first, second]);
      same(answers, [[], [shared.messageId]], 'what the two writers were told was already there');
      same(
        (await rows()).filter((r) => r.messageId === shared.messageId).length,
        1,
        'rows of the shared id',
      );
    },
  },
  {
    name: 'a writer that enqueues again while a concurrent writer of its id waits keeps its transaction; the waiter is told the id is there',
    async run({ store, rows, fixture }) {
      // Two open transactions enqueue one id (no key: no key lock orders them); the second
      // waits on the first's row. The first then enqueues more: an insert that held the
      // table's AUTO-INC lock while it waited (InnoDB's INSERT … SELECT) deadlocked here, and
      // the first writer lost its whole transaction (MariaDB error 1467, which deadlock
      // retries do not recognise). SQLite has one writer at a time: the second follows.
      const shared = message(null, { messageId: randomUUID() });
      const later = [message(null), message('k')];
      const overlap = !outboxDatabase(fixture.sql.databaseType).singleWriter;
      let release: () => void = () => undefined;
      const held = new Promise<void>((resolve) => (release = resolve));
      let secondStarted: () => void = () => undefined;
      const started = new Promise<void>((resolve) => (secondStarted = resolve));
      const first = fixture.inTransaction(async (tx) => {
        const skipped = [...(await store.insert(tx, [shared], true))];
        if (overlap) {
          await held;
          // The second writer is waiting on the shared id now.
          for (const row of later) skipped.push(...(await store.insert(tx, [row], true)));
        } else {
          for (const row of later) skipped.push(...(await store.insert(tx, [row], true)));
        }
        return skipped;
      });
      if (!overlap) await first;
      else await sleep(100);
      const second = fixture.inTransaction(async (tx) => {
        secondStarted();
        return store.insert(tx, [shared], true);
      });
      await started;
      await sleep(overlap ? 300 : 0);
      release();
      const answers = await Promise.allSettled([first, second]);
      same(
        answers.map((a) => (a.status === 'fulfilled' ? a.value : String(a.reason))),
        [[], [shared.messageId]],
        'what the two writers were told was already there',
      );
      same(
        (await rows()).map((r) => r.messageId),
        [shared, ...later].map((m) => m.messageId),
        'the rows written (the first writer kept all of its transaction)',
      );
    },
  },
];

/**
 * The store conformance suite, for a SQL port (an ORM or driver adapter) on one database: the
 * outbox's store on top of the port must claim, park, promote, settle with fencing, requeue,
 * purge, share no row between concurrent claimers, and write with the caller's transaction.
 * Framework-free: wrap each case in your runner's test function.
 *
 * @example
 * for (const c of storeConformanceCases()) it(c.name, () => c.run(target), 30_000);
 */
export function storeConformanceCases(): StoreConformanceCase[] {
  return CASES.map((c) => ({
    name: c.name,
    run: (target) => withStore(target, (context) => c.run(context), c.maxRun),
  }));
}
