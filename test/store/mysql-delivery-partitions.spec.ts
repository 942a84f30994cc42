import { createHash, randomUUID } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
import type { SqlPort } from '../../lib/testing';
import type { SqlRunner } from '../../lib/store/ports/sql-port';
import { MysqlOutboxStore } from '../../lib/store/mysql/mysql.store';
import { typeormSqlPort, typeormSqlRunner } from '../../lib/typeorm/typeorm.sql-port';
import { createOutboxStore } from '../../lib/store/create-outbox-store';
import { createOutboxTable, outboxTableDropDdl } from '../../lib/store/schema/outbox-table-ddl';
import { OutboxAdmin, OutboxOptionsError } from '../../lib';
import { outboxTableNames, type OutboxTableNames } from '../../lib/internal/sql-identifier';
import { mysqlDatabase } from '../../lib/store/mysql/mysql.database';
import type { SchemaPartSql } from '../../lib/store/outbox-database';
import type {
  OutboxDeliveryPartitionsPort,
  OutboxStore,
  PartitionMember,
  Settlement,
} from '../../lib/store/ports/outbox-store.port';
import { ALL_PARTITIONS } from '../../lib/store/shared-sql/delivery-partitions';
import { mysqlOwnerLockName, mysqlOwnerLockNameOf } from '../../lib/store/shared-sql/owner-leases';
import { mysqlLeasesModeSlots } from '../../lib/store/shared-sql/leases-mode-lock';
import { messageIdText } from '../../lib/store/rows/message-id-codec';
import { readAttempts, readOutbox, testDatabase, uniqueTable } from '../support/databases';
import { createChar36Tables } from '../support/mysql-char36-tables';
import { describeWith } from '../support/services';

// Partitioned delivery's store on MySQL/MariaDB (schema step 9 and OutboxDeliveryPartitionsPort),
// against the real server: what test/dispatch/partitions.spec.ts proves of PostgreSQL's at the
// store's level. Bootstrap still refuses `dispatcher.claims: 'partitions'` on MySQL
// (test/module/optional-steps.spec.ts): the step and the port are reached here directly.

const db = testDatabase('mariadb');
const NONE: Settlement = { delivered: [], retry: [], dead: [], release: [], advancedKeys: [] };
const step9 = mysqlDatabase.schema.deliveryPartitions as SchemaPartSql;

/** PostgreSQL's partition of a key (or an unkeyed message's id text): MD5's first byte. */
const partitionOf = (text: string): number =>
  createHash('md5').update(text, 'utf8').digest()[0] as number;

const member = (id: string, validMs = 60_000, lockKey?: number): PartitionMember => ({
  id,
  label: id,
  validMs,
  ...(lockKey === undefined ? {} : { lockKey }),
});

describeWith(['mariadb'], 'MySQL/MariaDB delivery partitions: the store', () => {
  let ds: DataSource;
  let sql: SqlPort;
  let table: string;
  let names: OutboxTableNames;
  let store: OutboxStore;
  let parts: OutboxDeliveryPartitionsPort;
  const sessions: QueryRunner[] = [];

  const run = async (statement: string, params?: unknown[]): Promise<unknown> =>
    (await sql.query(statement, params)).rows;
  const q = (suffix = ''): string => `\`${table}${suffix}\``;

  async function storeOn(
    onDeadLetter: 'block' | 'skip' = 'block',
    name = table,
  ): Promise<OutboxStore> {
    return createOutboxStore(
      sql,
      { tableName: name, schema: null, ordering: { enabled: true, onDeadLetter } },
      { enabled: false, notify: false },
    );
  }

  /** What a 'leases' dispatcher's owner-lock session runs once the mode is offered here. */
  function takeLeasesModeSlot(session: SqlRunner): Promise<readonly string[]> {
    if (!(store instanceof MysqlOutboxStore)) throw new Error('not the MySQL/MariaDB store');
    return store.takeLeasesModeSlot(session);
  }

  beforeEach(async () => {
    table = uniqueTable('outbox_dp');
    ds = await db.open(table);
    sql = typeormSqlPort(ds);
    names = outboxTableNames(table, null, 'backtick');
    store = await storeOn();
    parts = store.deliveryPartitions as OutboxDeliveryPartitionsPort;
  });
  afterEach(async () => {
    for (const s of sessions.splice(0)) {
      // A test that failed mid-way may leave one in a transaction, whose locks the drop waits for.
      if (s.isTransactionActive) await s.rollbackTransaction();
      await s.release();
    }
    for (const s of outboxTableDropDdl('mysql', { tableName: table }, 'all')) await ds.query(s);
    await db.close(ds, table);
  });

  /** Commits one message per entry (its key), in order; answers their message ids. */
  async function enqueue(keys: readonly (string | null)[], on = store): Promise<string[]> {
    const ids = keys.map(() => randomUUID());
    await ds.transaction((m) =>
      on.insert(
        typeormSqlRunner(m.queryRunner as QueryRunner),
        keys.map((key, i) => ({
          messageId: ids[i] as string,
          topic: 't',
          key,
          type: 'T',
          payload: JSON.stringify({ i }),
          headers: '{}',
          availableAt: null,
          delayMs: null,
        })),
        true,
      ),
    );
    return ids;
  }

  /** One message committed by `queue`: its message id and its row's id. */
  interface Queued {
    readonly id: string;
    readonly row: string;
  }

  /** `enqueue`, answering each message's ids, one per key given (a tuple as long as `keys`). */
  async function queue<const K extends readonly (string | null)[]>(
    keys: K,
  ): Promise<{ -readonly [I in keyof K]: Queued }> {
    const ids = await enqueue(keys);
    const rows = await rowIds();
    return ids.map((id) => ({ id, row: rows.get(id) as string })) as {
      -readonly [I in keyof K]: Queued;
    };
  }

  /** Row id by message id. */
  async function rowIds(name = table): Promise<Map<string, string>> {
    return new Map((await readOutbox(ds, name)).map((r) => [r.messageId, r.id]));
  }

  /** Each row's stored partition, by message id. */
  async function partitions(name = table): Promise<Map<string, number>> {
    const rows = await ds.query<{ message_id: string | Uint8Array; p: number }[]>(
      `SELECT message_id, delivery_partition AS p FROM \`${name}\` ORDER BY id`,
    );
    return new Map(rows.map((r) => [messageIdText(r.message_id), Number(r.p)]));
  }

  /** The owners table: partition → [owner, generation]. */
  async function owners(): Promise<Map<number, [string | null, string]>> {
    const rows = await ds.query<{ p: number; owner: string | null; g: string }[]>(
      `SELECT \`partition\` AS p, owner, CAST(generation AS CHAR) AS g FROM ${q('_owners')}`,
    );
    return new Map(rows.map((r) => [Number(r.p), [r.owner, String(r.g)]]));
  }

  /** A session of its own (a 'leases' dispatcher's owner-lock session, a lock holder). */
  async function session(): Promise<QueryRunner> {
    const runner = ds.createQueryRunner();
    await runner.connect();
    sessions.push(runner);
    return runner;
  }

  const fenceOf = (taken: ReadonlyMap<number, { generation: string }>): Map<number, string> =>
    new Map([...taken].map(([p, t]) => [p, t.generation]));

  const everything = { after: '0', ids: [], keys: [] };

  /** `id` beats and takes every partition: its fence. */
  async function ownAll(id: string): Promise<Map<number, string>> {
    await parts.beat(member(id), false);
    return fenceOf(await parts.take(id, ALL_PARTITIONS));
  }

  describe('schema step 9', () => {
    it("fills the partition of every row already there (a key's rows in one, MD5's first byte of the key or the id), is found by has, and drop removes it", async () => {
      const ids = await enqueue(['a', 'a', 'b', null, null]);
      expect(await step9.has(run, names)).toBe(false);
      await step9.ensure(run, names);
      await step9.ensure(run, names); // made once: a second run changes nothing
      expect(await step9.has(run, names)).toBe(true);
      const [later] = await enqueue([null]);
      const stored = await partitions();
      const keys = ['a', 'a', 'b', null, null, null];
      for (const [i, id] of [...ids, later as string].entries()) {
        expect(stored.get(id)).toBe(partitionOf(keys[i] ?? id));
      }
      expect(stored.get(ids[0] as string)).toBe(stored.get(ids[1] as string));
      expect((await owners()).size).toBe(256);
      expect([...(await owners()).values()].every(([o, g]) => o === null && g === '0')).toBe(true);

      await step9.drop(run, names);
      expect(await step9.has(run, names)).toBe(false);
      const left = await ds.query<{ n: number }[]>(
        `SELECT COUNT(*) AS n FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'delivery_partition'`,
        [table],
      );
      expect(Number(left[0]?.n)).toBe(0);
      const tables = await ds.query<{ n: number }[]>(
        `SELECT COUNT(*) AS n FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?)`,
        [`${table}_dispatchers`, `${table}_owners`],
      );
      expect(Number(tables[0]?.n)).toBe(0);
      // The rows are all there, untouched.
      expect((await readOutbox(ds, table)).map((r) => r.messageId)).toEqual([...ids, later]);
    });

    it('gives a table with CHAR(36) ids (made before 0.3) the same partitions: the id as its text', async () => {
      const old = uniqueTable('outbox_dp36');
      await createChar36Tables(sql, old);
      try {
        const oldNames = outboxTableNames(old, null, 'backtick');
        const ids = await enqueue([null, 'k', null], await storeOn('block', old));
        await step9.ensure(run, oldNames);
        expect(await step9.has(run, oldNames)).toBe(true);
        const stored = await partitions(old);
        expect(ids.map((id) => stored.get(id))).toEqual(
          [ids[0] as string, 'k', ids[2] as string].map(partitionOf),
        );
        // The ids converted to BINARY(16) and back: the column, generated from the id, is made
        // again with each layout, and every row keeps its partition.
        const convert = mysqlDatabase.schema.convertMessageIds;
        for (const layout of ['binary', 'text'] as const) {
          expect((await convert?.(run, oldNames, layout))?.layout).toBe(layout);
          expect(await step9.has(run, oldNames)).toBe(true);
          expect(await partitions(old)).toEqual(stored);
          const [{ type } = { type: '' }] = await ds.query<{ type: string }[]>(
            `SELECT DATA_TYPE AS type FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'message_id'`,
            [old],
          );
          expect(type.toLowerCase()).toBe(layout === 'binary' ? 'binary' : 'char');
        }
        // Rows written after the conversion get theirs from the new layout.
        const [after] = await enqueue([null], await storeOn('block', old));
        expect((await partitions(old)).get(after as string)).toBe(partitionOf(after as string));
      } finally {
        for (const s of outboxTableDropDdl('mysql', { tableName: old }, 'all')) await ds.query(s);
        await ds.query(`DROP TABLE IF EXISTS \`${old}_archive\``);
      }
    });

    it("is made by no migration, and bootstrap refuses dispatcher.claims 'partitions' on MySQL even where the table has it", async () => {
      // The table was made with every option (test/support/databases.ts): step 9 left out.
      expect(await step9.has(run, names)).toBe(false);
      await createOutboxTable(sql, { tableName: table, with: ['partitions'] });
      expect(await step9.has(run, names)).toBe(false);
      await step9.ensure(run, names);
      const opening = createOutboxStore(
        sql,
        {
          tableName: table,
          schema: null,
          dispatcher: { dbTimeoutMs: 10_000, claims: 'partitions' },
        },
        { enabled: true, notify: false },
      );
      await expect(opening).rejects.toBeInstanceOf(OutboxOptionsError);
      await expect(opening).rejects.toMatchObject({ option: 'dispatcher.claims' });
      // The admin's view says they are not in use here, as before: its SQL has no reads of them.
      const view = await new OutboxAdmin(sql, store, { tableName: table }).deliveryPartitions();
      expect(view).toMatchObject({ inUse: false, reason: 'database' });
    });
  });

  describe('the port', () => {
    beforeEach(async () => {
      await step9.ensure(run, names);
    });

    it('two members beat and take partitions; a live owner keeps its own, and each take by another raises the generation', async () => {
      const first = await parts.beat(member('a'), false);
      expect(first).toMatchObject({ working: true, live: [], labelShared: false });
      expect(first.owned.size).toBe(0);
      const taken = await parts.take('a', [1, 2, 3]);
      expect([...taken]).toEqual([
        [1, { generation: '1', previous: null }],
        [2, { generation: '1', previous: null }],
        [3, { generation: '1', previous: null }],
      ]);
      const b = await parts.beat(member('b'), false);
      expect(b.live).toEqual(['a']);
      // A live owner's partition is not taken…
      expect((await parts.take('b', [2])).size).toBe(0);
      expect((await owners()).get(2)).toEqual(['a', '1']);
      // …until its heartbeat is older than what it promised: then at a higher generation.
      await parts.beat(member('a', 10), true);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect([...(await parts.take('b', [2]))]).toEqual([[2, { generation: '2', previous: 'a' }]]);
      expect((await owners()).get(2)).toEqual(['b', '2']);
      const again = await parts.beat(member('a'), true);
      expect([...again.owned]).toEqual([
        [1, '1'],
        [3, '1'],
      ]);
      // Its own partition taken again keeps its generation: its settles still stand.
      expect([...(await parts.take('a', [1]))]).toEqual([[1, { generation: '1', previous: 'a' }]]);
      await parts.release('a', [1]);
      expect((await owners()).get(1)).toEqual([null, '1']);
      expect([...(await parts.take('b', [1]))]).toEqual([[1, { generation: '2', previous: null }]]);
      const held = await parts.owners();
      expect(
        held.map(({ owner, label, partitions: n, live }) => ({ owner, label, n, live })),
      ).toEqual([
        { owner: 'a', label: 'a', n: 1, live: true },
        { owner: 'b', label: 'b', n: 2, live: true },
        { owner: null, label: null, n: 253, live: false },
      ]);
      await parts.leave('a');
      expect((await owners()).get(3)).toEqual([null, '1']);
      const rows = await ds.query<{ instance: string }[]>(
        `SELECT instance FROM ${q('_dispatchers')}`,
      );
      expect(rows.map((r) => r.instance)).toEqual(['b']);
      // Two processes given one label are told so.
      expect((await parts.beat({ id: 'c', label: 'b', validMs: 60_000 }, false)).labelShared).toBe(
        true,
      );
    });

    it('reads the due pending rows of its partitions in id order, each with the earlier row of its key that holds it back, past the ids, keys and leases it is told of', async () => {
      const queued = await queue([
        'v',
        'z',
        'z',
        'k',
        'k',
        'w',
        'w',
        'd',
        'd',
        'x',
        'x',
        null,
        'l',
        'skip',
        'gone',
        'y',
        'y',
        'y',
        'z',
        'v',
      ]);
      const [v1, z1, z2, k1, k2, w1, w2, d1, d2, x1, x2, u, leased, skipped, elsewhere] =
        queued.map((m) => m.id);
      const [y1, y2, y3, z3, v2] = queued.slice(15).map((m) => m.id);
      const at = (m: string | undefined): string => queued.find((q) => q.id === m)?.row ?? '';
      const ids = queued.map((m) => m.id);
      // k1 backs off, w1, y2, z1 and z2 are parked, d1 and v1 are dead (dead messages block:
      // 'block'), l is leased. z's parked rows and v's dead one are below every row read, y's
      // parked one between two of them.
      await ds.query(
        `UPDATE ${q()} SET available_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = ?`,
        [at(k1)],
      );
      await ds.query(`UPDATE ${q()} SET status = 'waiting' WHERE id IN (?, ?, ?, ?)`, [
        at(w1),
        at(y2),
        at(z1),
        at(z2),
      ]);
      await ds.query(`UPDATE ${q()} SET status = 'dead' WHERE id IN (?, ?)`, [at(d1), at(v1)]);
      await ds.query(
        `UPDATE ${q()} SET locked_until = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, lock_token = ? WHERE id = ?`,
        [randomUUID(), at(leased)],
      );
      const stored = await partitions();
      const other = stored.get(elsewhere ?? '') as number;
      const asked = ALL_PARTITIONS.filter((p) => p !== other);
      // The keys' partitions differ from 'gone''s; the unkeyed row's is its random id's.
      const expected = [k2, w2, d2, x1, x2, u, skipped, y1, y3, z3, v2].filter(
        (m) => stored.get(m ?? '') !== other,
      );
      const read = await parts.readOwned(asked, 100, everything);
      expect(read.records.map((r) => r.messageId)).toEqual(expected);
      expect(read.records.every((r) => r.attempts === 1)).toBe(true);
      expect(Object.fromEntries(read.previous)).toEqual({
        [at(k2)]: at(k1),
        [at(w2)]: at(w1),
        [at(d2)]: at(d1),
        [at(x2)]: at(x1),
        [at(y3)]: at(y2),
        [at(z3)]: at(z2),
        [at(v2)]: at(v1),
      });
      for (const r of read.records) expect(read.partitions.get(r.id)).toBe(stored.get(r.messageId));
      expect(read.snapshot).toEqual({ xmin: 0n, xid: 0n });
      // After an id, at most a limit, without the ids and keys it holds.
      const next = await parts.readOwned(asked, 2, {
        after: at(k2),
        ids: [at(x1)],
        keys: ['w'],
      });
      expect(next.records.map((r) => r.messageId)).toEqual([d2, x2]);
      // Under 'skip', a dead message holds nothing back.
      const skipping = (await storeOn('skip')).deliveryPartitions as OutboxDeliveryPartitionsPort;
      const read2 = await skipping.readOwned(asked, 100, everything);
      expect(read2.previous.has(at(d2))).toBe(false);
      expect(read2.previous.has(at(v2))).toBe(false);
      expect(read2.previous.get(at(k2))).toBe(at(k1));
      // …unless its type's policy says otherwise.
      const typed = await createOutboxStore(
        sql,
        {
          tableName: table,
          schema: null,
          ordering: { enabled: true, onDeadLetter: 'skip', deadLetterExceptions: ['T'] },
        },
        { enabled: false, notify: false },
      );
      const read3 = await (typed.deliveryPartitions as OutboxDeliveryPartitionsPort).readOwned(
        asked,
        100,
        everything,
      );
      expect(read3.previous.get(at(d2))).toBe(at(d1));
      expect(read3.previous.get(at(v2))).toBe(at(v1));
      // Nothing was written: every row as it was.
      expect((await readOutbox(ds, table)).map((r) => [r.status, r.attempts])).toEqual(
        ids.map((m) => [
          [w1, y2, z1, z2].includes(m) ? 'waiting' : [d1, v1].includes(m) ? 'dead' : 'pending',
          0,
        ]),
      );
      expect((await parts.readOwned([], 10, everything)).records).toEqual([]);
    });

    it('settles as the owner: each group written, one history row per failure naming the owner', async () => {
      const [{ row: delivered }, { row: retried }, { row: died }, { id: last, row: released }] =
        await queue(['a', 'b', 'c', 'd']);
      const fence = await ownAll('owner');
      const settled = await parts.settleOwned(
        'owner',
        fence,
        {
          delivered: [delivered],
          retry: [{ id: retried, delayMs: 60_000, error: 'no', errorClass: 'Error' }],
          dead: [{ id: died, error: 'gone', errorClass: 'PermanentPublishError' }],
          release: [
            { id: released, delayMs: 0, error: 'down', errorClass: 'PublisherUnavailableError' },
          ],
          advancedKeys: ['a'],
        },
        false,
        randomUUID(),
      );
      expect(settled).toEqual({ changed: 4, promoted: 0 });
      expect((await readOutbox(ds, table)).map((r) => [r.status, r.attempts, r.lastError])).toEqual(
        [
          ['delivered', 1, null],
          ['pending', 1, 'no'],
          ['dead', 1, 'gone'],
          ['pending', 0, 'down'],
        ],
      );
      expect(
        (await readAttempts(ds, table)).map((h) => [h.outcome, h.attempt, h.lockedBy]),
      ).toEqual([
        ['retry', 1, 'owner'],
        ['dead', 1, 'owner'],
        ['outage', 1, 'owner'],
      ]);
      // The retried row is not due, the released one is, and neither is leased.
      const read = await parts.readOwned(ALL_PARTITIONS, 10, everything);
      expect(read.records.map((r) => r.messageId)).toEqual([last]);
    });

    it('a settle sent again after its answer was lost changes nothing: one attempt, one history row', async () => {
      const [retried, released] = await queue(['a', 'b']);
      const fence = await ownAll('settler');
      const settlement: Settlement = {
        ...NONE,
        retry: [
          {
            id: retried.row,
            delayMs: 60_000,
            error: 'no',
            errorClass: 'Error',
          },
        ],
        release: [
          {
            id: released.row,
            delayMs: 60_000,
            error: 'outage',
            errorClass: 'PublisherUnavailableError',
          },
        ],
      };
      const token = randomUUID();
      expect((await parts.settleOwned('settler', fence, settlement, false, token)).changed).toBe(2);
      expect((await parts.settleOwned('settler', fence, settlement, false, token)).changed).toBe(0);
      const after = await readOutbox(ds, table);
      expect(after.map((r) => [r.status, r.attempts])).toEqual([
        ['pending', 1],
        ['pending', 0],
      ]);
      expect((await readAttempts(ds, table)).map((h) => h.outcome).sort()).toEqual([
        'outage',
        'retry',
      ]);
      // A later settle (another token) of the same rows is written: the token marks one settle.
      expect(
        (await parts.settleOwned('settler', fence, settlement, false, randomUUID())).changed,
      ).toBe(2);
    });

    it("refuses a settle from an owner whose partition was taken over, changing nothing, and takes the new owner's", async () => {
      const [id, other] = await queue(['k', 'other']);
      const stored = await partitions();
      const p = stored.get(id.id) as number;
      const q2 = stored.get(other.id) as number;
      if (p === q2) throw new Error('both keys in one partition: pick other keys');
      await parts.beat(member('old'), false);
      const old = fenceOf(await parts.take('old', [p, q2]));
      await parts.beat(member('new'), false);
      await parts.beat(member('old', 10), true);
      await new Promise((resolve) => setTimeout(resolve, 50));
      const taken = fenceOf(await parts.take('new', [p]));
      expect(BigInt(taken.get(p) as string)).toBeGreaterThan(BigInt(old.get(p) as string));
      const settlement: Settlement = {
        ...NONE,
        retry: [
          {
            id: id.row,
            delayMs: 60_000,
            error: 'late',
            errorClass: 'Error',
          },
        ],
        advancedKeys: [],
      };
      expect(await parts.settleOwned('old', old, settlement, false, randomUUID())).toEqual({
        changed: 0,
        promoted: 0,
      });
      expect((await readOutbox(ds, table)).map((r) => [r.status, r.attempts, r.lastError])).toEqual(
        [
          ['pending', 0, null],
          ['pending', 0, null],
        ],
      );
      expect(await readAttempts(ds, table)).toEqual([]);
      // Nor may it lease them for a deaf publish.
      expect(await parts.holdOwned('old', old, [id.row], 30_000, randomUUID())).toBe(0);
      // A settle across both partitions changes only the row of the one it still holds.
      const both: Settlement = {
        ...NONE,
        delivered: [id.row, other.row],
        advancedKeys: ['k', 'other'],
      };
      expect((await parts.settleOwned('old', old, both, false, randomUUID())).changed).toBe(1);
      expect((await readOutbox(ds, table)).map((r) => r.status)).toEqual(['pending', 'delivered']);
      expect((await parts.settleOwned('new', taken, both, false, randomUUID())).changed).toBe(1);
      expect((await readOutbox(ds, table)).map((r) => [r.status, r.attempts])).toEqual([
        ['delivered', 1],
        ['delivered', 1],
      ]);
    });

    it('a settle fenced by an older generation changes nothing, even where its process owns the partition again', async () => {
      const [id] = await queue(['k']);
      const p = (await partitions()).get(id.id) as number;
      await parts.beat(member('a'), false);
      await parts.beat(member('b'), false);
      const first = fenceOf(await parts.take('a', [p]));
      // Handed over to b and back: a owns it again, two generations on.
      await parts.release('a', [p]);
      await parts.take('b', [p]);
      await parts.release('b', [p]);
      const now = fenceOf(await parts.take('a', [p]));
      expect(BigInt(now.get(p) as string)).toBe(BigInt(first.get(p) as string) + 2n);
      const done: Settlement = { ...NONE, delivered: [id.row] };
      expect((await parts.settleOwned('a', first, done, false, randomUUID())).changed).toBe(0);
      expect(await parts.holdOwned('a', first, done.delivered, 30_000, randomUUID())).toBe(0);
      expect((await readOutbox(ds, table)).map((r) => [r.status, r.lockedBy])).toEqual([
        ['pending', null],
      ]);
      expect((await parts.settleOwned('a', now, done, false, randomUUID())).changed).toBe(1);
    });

    it('a settle that moves a key on gives back every row parked behind it; a key still held keeps its own', async () => {
      const queued = await queue(['k', 'k', 'k', 'h', 'h', 'h']);
      const at = (i: number): string => queued[i]?.row ?? '';
      // k: head delivered now, two parked behind it; h: a dead head (blocking) before the
      // head this batch delivers, one parked.
      await ds.query(`UPDATE ${q()} SET status = 'waiting' WHERE id IN (?, ?, ?)`, [
        at(1),
        at(2),
        at(5),
      ]);
      await ds.query(`UPDATE ${q()} SET status = 'dead' WHERE id = ?`, [at(3)]);
      const fence = await ownAll('owner');
      const settled = await parts.settleOwned(
        'owner',
        fence,
        { ...NONE, delivered: [at(0), at(4)], advancedKeys: ['k', 'h'] },
        false,
        randomUUID(),
      );
      expect(settled).toEqual({ changed: 2, promoted: 2 });
      expect((await readOutbox(ds, table)).map((r) => r.status)).toEqual([
        'delivered',
        'pending',
        'pending',
        'dead',
        'delivered',
        'waiting',
      ]);
    });

    it('deletes delivered rows with their history where asked', async () => {
      const [id, kept] = await queue(['a', 'b']);
      const fence = await ownAll('owner');
      const retry: Settlement = {
        ...NONE,
        retry: [{ id: id.row, delayMs: 0, error: 'once', errorClass: 'Error' }],
      };
      await parts.settleOwned('owner', fence, retry, true, randomUUID());
      expect(await readAttempts(ds, table)).toHaveLength(1);
      const done: Settlement = {
        ...NONE,
        delivered: [id.row],
        advancedKeys: ['a'],
      };
      expect((await parts.settleOwned('owner', fence, done, true, randomUUID())).changed).toBe(1);
      expect((await readOutbox(ds, table)).map((r) => r.messageId)).toEqual([kept.id]);
      expect(await readAttempts(ds, table)).toEqual([]);
    });

    it('on a time-partitioned table, a delivered row deleted at its settle takes its id guard along: the id may be enqueued again', async () => {
      const parted = uniqueTable('outbox_dpp');
      await createOutboxTable(sql, { tableName: parted, partitioning: { interval: 'day' } });
      try {
        await step9.ensure(run, outboxTableNames(parted, null, 'backtick'));
        const on = await storeOn('block', parted);
        const owner = on.deliveryPartitions as OutboxDeliveryPartitionsPort;
        const id = randomUUID();
        const insert = (): Promise<readonly string[]> =>
          ds.transaction((m) =>
            on.insert(
              typeormSqlRunner(m.queryRunner as QueryRunner),
              [
                {
                  messageId: id,
                  topic: 't',
                  key: 'k',
                  type: 'T',
                  payload: '{}',
                  headers: '{}',
                  availableAt: null,
                  delayMs: null,
                  idempotent: true,
                },
              ],
              true,
            ),
          );
        expect(await insert()).toEqual([]);
        expect(await insert()).toEqual([id]); // guarded: written once
        await owner.beat(member('owner'), false);
        const fence = fenceOf(await owner.take('owner', ALL_PARTITIONS));
        const [record] = (await owner.readOwned(ALL_PARTITIONS, 10, everything)).records;
        expect(record?.messageId).toBe(id);
        const done: Settlement = { ...NONE, delivered: [record?.id ?? ''], advancedKeys: ['k'] };
        expect((await owner.settleOwned('owner', fence, done, true, randomUUID())).changed).toBe(1);
        expect(await readOutbox(ds, parted)).toEqual([]);
        const [guards] = await ds.query<{ n: number }[]>(
          `SELECT COUNT(*) AS n FROM \`${parted}_ids\``,
        );
        expect(Number(guards?.n)).toBe(0);
        expect(await insert()).toEqual([]);
        expect((await readOutbox(ds, parted)).map((r) => r.messageId)).toEqual([id]);
      } finally {
        for (const s of outboxTableDropDdl('mysql', { tableName: parted }, 'all')) {
          await ds.query(s);
        }
      }
    });

    it('leases the rows of a deaf publish in the partitions it holds, as a claim would: reads pass them over', async () => {
      const [id] = await queue(['k']);
      const fence = await ownAll('owner');
      const token = randomUUID();
      expect(await parts.holdOwned('owner', fence, [id.row], 30_000, token)).toBe(1);
      const [leased] = await ds.query<{ lock_token: string; locked: number; later: number }[]>(
        `SELECT lock_token, locked_until > UTC_TIMESTAMP(6) AS locked, available_at > UTC_TIMESTAMP(6) AS later FROM ${q()}`,
      );
      expect(leased).toMatchObject({ lock_token: token, locked: 1, later: 1 });
      expect((await parts.readOwned(ALL_PARTITIONS, 10, everything)).records).toEqual([]);
      // The lease ends as a claim's does: the unlocker's release and the lease renewal know it.
      expect(await store.renewLease?.([id.row], token, 30_000)).toBe(1);
    });

    it('a look ends a member whose owner lock no session holds, and answers the lapsing ones; not one that beats on time, nor one whose lock is held', async () => {
      const holder = await session();
      const key = (): number => 1 + Math.floor(Math.random() * 2_000_000_000);
      const [onTime, lapsing, gone, held] = [key(), key(), key(), key()];
      for (const k of [onTime, lapsing, held]) {
        await holder.query('SELECT GET_LOCK(?, 0)', [mysqlOwnerLockName(k)]);
      }
      await ds.query(
        `INSERT INTO ${q('_dispatchers')} (instance, label, valid_ms, working, lock_key, heartbeat_at) VALUES
         ('a', 'on-time', 1000, TRUE, ?, UTC_TIMESTAMP(6)),
         ('b', 'lapsing', 5000, TRUE, ?, UTC_TIMESTAMP(6) - INTERVAL 4500 * 1000 MICROSECOND),
         ('c', 'gone', 60000, TRUE, ?, UTC_TIMESTAMP(6)),
         ('d', 'held', 60000, TRUE, ?, UTC_TIMESTAMP(6))`,
        [onTime, lapsing, gone, held],
      );
      const look = async () =>
        (await parts.endGoneMembers?.('observer', 1_250))
          ?.map(({ label, cut }) => ({ label, cut }))
          .sort((x, y) => x.label.localeCompare(y.label));
      expect(await look()).toEqual([
        { label: 'gone', cut: true },
        { label: 'lapsing', cut: false },
      ]);
      const [cut] = await ds.query<{ lock_key: number | null; valid_ms: number }[]>(
        `SELECT lock_key, valid_ms FROM ${q('_dispatchers')} WHERE instance = 'c'`,
      );
      expect(cut?.lock_key).toBeNull();
      expect(cut?.valid_ms).toBeLessThan(2_000);
      // One whose lock is held keeps its heartbeat and its key.
      const [kept] = await ds.query<{ lock_key: number | null; valid_ms: number }[]>(
        `SELECT lock_key, valid_ms FROM ${q('_dispatchers')} WHERE instance = 'd'`,
      );
      expect(kept).toEqual({ lock_key: held, valid_ms: 60_000 });
      // Its key is cleared: the next look answers it as ending, not cut again. The look gave
      // back the lock it took to cut it.
      expect(await look()).toEqual([
        { label: 'gone', cut: false },
        { label: 'lapsing', cut: false },
      ]);
      const [free] = await ds.query<{ free: number }[]>('SELECT IS_FREE_LOCK(?) AS free', [
        mysqlOwnerLockName(gone),
      ]);
      expect(Number(free?.free)).toBe(1);
      // The statement's name of a stored key is the one the owner lock takes.
      const [named] = await ds.query<{ name: string }[]>(
        `SELECT ${mysqlOwnerLockNameOf('k.lock_key')} AS name FROM (SELECT ? AS lock_key) AS k`,
        [onTime],
      );
      expect(named?.name).toBe(mysqlOwnerLockName(onTime));
    });

    it("offers no 'leases' mode interlock while the mode is not offered here: a 'leases' dispatcher's owner lock takes no slot and its claims wait on nothing", () => {
      expect(mysqlDatabase.deliveryPartitionsOffered).toBe(false);
      expect(store.enterLeasesMode).toBeUndefined();
    });

    it("a session holding a 'leases' mode slot keeps members from working and is named; given up, the next beat works", async () => {
      const leases = await session();
      // What a 'leases' dispatcher does on its owner-lock session: no member works yet.
      expect(await takeLeasesModeSlot(typeormSqlRunner(leases))).toEqual([]);
      const [{ id: connection } = { id: 0 }] = await leases.query('SELECT CONNECTION_ID() AS id');
      expect((await parts.beat(member('p'), false)).working).toBe(false);
      expect(await parts.leasesModeHolders()).toEqual([
        expect.stringMatching(new RegExp(`^session ${String(connection)}\\b`)),
      ]);
      await store.unlockOwner?.(typeormSqlRunner(leases));
      expect(await parts.leasesModeHolders()).toEqual([]);
      expect((await parts.beat(member('p'), false)).working).toBe(true);
      // Once a member works, a 'leases' dispatcher entering is told so and keeps no slot…
      expect(await takeLeasesModeSlot(typeormSqlRunner(leases))).toEqual(['p']);
      expect(await parts.leasesModeHolders()).toEqual([]);
      // …and a member that works stays working.
      expect((await parts.beat(member('p'), true)).working).toBe(true);
    });

    it("a 'leases' dispatcher entering while a heartbeat decides is refused at once and keeps no slot; once it committed, it is told what it decided", async () => {
      await parts.beat(member('p'), false);
      await ds.query(`UPDATE ${q('_dispatchers')} SET working = FALSE`);
      const [{ db: database } = { db: '' }] =
        await ds.query<{ db: string }[]>('SELECT DATABASE() AS db');
      const slots = mysqlLeasesModeSlots(names, database);
      const slotsUsed = async (): Promise<number> => {
        const [used] = await ds.query<{ n: number }[]>(
          `SELECT ${slots.map(() => '(IS_USED_LOCK(?) IS NOT NULL)').join(' + ')} AS n`,
          slots,
        );
        return Number(used?.n);
      };
      // A heartbeat deciding: its row locked, its answer not committed yet. The 'leases' side
      // runs this on its owner lock's session, whose own heartbeat cannot wait for it: it is
      // answered before the server's lock wait timeout (50 s) would have ended a wait.
      const beat = await session();
      await beat.startTransaction();
      await beat.query(`UPDATE ${q('_dispatchers')} SET working = TRUE WHERE instance = 'p'`);
      const leases = typeormSqlRunner(await session());
      const refused = await Promise.race([
        takeLeasesModeSlot(leases),
        new Promise<'waited'>((resolve) => setTimeout(() => resolve('waited'), 3_000).unref()),
      ]);
      expect(refused).toEqual([expect.stringContaining('deciding')]);
      expect(await slotsUsed()).toBe(0);
      await beat.commitTransaction();
      // Asked again: the heartbeat made 'p' work, so it still keeps no slot.
      expect(await takeLeasesModeSlot(leases)).toEqual(['p']);
      expect(await slotsUsed()).toBe(0);
      // And with no member working and none deciding, it takes one.
      await ds.query(`UPDATE ${q('_dispatchers')} SET working = FALSE`);
      expect(await takeLeasesModeSlot(leases)).toEqual([]);
      expect(await slotsUsed()).toBe(1);
    });

    it('promotes orphaned parked rows and refreshes the statistics', async () => {
      const [, parked] = await queue(['k', 'k']);
      await ds.query(`UPDATE ${q()} SET status = 'delivered' WHERE id < ?`, [parked.row]);
      await ds.query(`UPDATE ${q()} SET status = 'waiting' WHERE id = ?`, [parked.row]);
      expect(await parts.promoteOrphans(10)).toBe(1);
      expect((await readOutbox(ds, table)).map((r) => r.status)).toEqual(['delivered', 'pending']);
      await parts.refreshStatistics();
    });
  });
});
