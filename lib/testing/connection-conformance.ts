import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { OutboxError } from '../errors/outbox.error';
import { OutboxTransactionRequiredError } from '../errors/outbox-transaction-required.error';
import { createOutboxStore } from '../store/create-outbox-store';
import { messageIdText } from '../store/rows/message-id-codec';
import {
  createOutboxTable,
  outboxDialectOf,
  outboxTableDropDdl,
} from '../store/schema/outbox-table-ddl';
import type { OutboxConnection } from '../store/ports/outbox-connection';
import type { NewOutboxRow, OutboxStore } from '../store/ports/outbox-store.port';
import { OUTBOX_STEP_OPTIONS } from '../store/schema/schema-steps';

/**
 * One library's connection (`OutboxConnection`) on one database, for the connection conformance
 * suite: the connection under test and the handles an app of that library holds.
 */
export interface ConnectionConformanceFixture<Tx> {
  readonly connection: OutboxConnection<Tx>;
  /**
   * Runs `work` in a transaction the way an app of the library opens one: committed when it
   * resolves, rolled back when `rollback` is true (resolving with `work`'s value) or when it throws.
   */
  inTransaction<T>(work: (tx: Tx) => Promise<T>, rollback?: boolean): Promise<T>;
  /**
   * What a careless caller passes instead of the transaction: the library's root handle (the
   * pool, the client, the `db`, the `PrismaClient`, the global EntityManager), after it has
   * handed out connections.
   */
  readonly rootHandle: unknown;
  /**
   * Runs `work` in a transaction of another pool (or client, or database) of the library than
   * the connection's, committed or rolled back as asked. Left out where the library has no such
   * thing (an embedded database opened once): say why in `ConnectionConformanceTarget.without`.
   */
  inForeignTransaction?<T>(work: (tx: Tx) => Promise<T>, rollback: boolean): Promise<T>;
  /**
   * Runs `work` in a nested transaction (or savepoint) of the library, inside an outer one that
   * commits or rolls back as asked; the nested one itself commits.
   */
  inNestedTransaction?<T>(work: (tx: Tx) => Promise<T>, rollbackOuter: boolean): Promise<T>;
  /**
   * Ends, on the server, every database connection the connection's port holds (as a failover,
   * an idle timeout at a proxy or `pg_terminate_backend` would), not the fixture's own reads.
   */
  killConnections?(): Promise<void>;
  /** Closes what `setUp` opened. The suite drops its own table first. */
  tearDown(): Promise<void>;
}

/** Why a fixture leaves out one of its optional handles; the case then checks that it does. */
export interface ConnectionConformanceWithout {
  readonly foreignTransaction?: string;
  readonly nestedTransaction?: string;
  readonly killedConnections?: string;
}

export interface ConnectionConformanceTarget<Tx> {
  readonly name: string;
  /** A fresh fixture per case. The suite creates (and drops) an outbox table of its own. */
  setUp(): Promise<ConnectionConformanceFixture<Tx>>;
  /** The optional handles the fixture leaves out, each with the reason. */
  readonly without?: ConnectionConformanceWithout;
}

/** One case of the suite: throws an `Error` saying what broke the contract. */
export interface ConnectionConformanceCase<Tx> {
  readonly name: string;
  run(target: ConnectionConformanceTarget<Tx>): Promise<void>;
}

function ok(condition: boolean, message: string): asserts condition {
  if (!condition) throw new Error(`connection conformance: ${message}`);
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** What a case works with: the fixture, and the enqueue path of the module on its own table. */
interface Context<Tx> {
  readonly fixture: ConnectionConformanceFixture<Tx>;
  readonly store: OutboxStore;
  /** What `OutboxService.enqueue()` does with a handle: join it, insert one message with it. */
  enqueue(tx: Tx): Promise<string>;
  /** The ids of the messages in the table. */
  stored(): Promise<string[]>;
  /** How many messages of the table are not delivered. */
  undelivered(): Promise<number>;
}

function row(messageId: string = randomUUID()): NewOutboxRow {
  return {
    messageId,
    idempotent: false,
    topic: 'conformance',
    key: `k-${messageId.slice(0, 8)}`,
    type: 'Tested',
    payload: '{}',
    headers: '{}',
    availableAt: null,
    delayMs: null,
  };
}

async function withTable<Tx>(
  target: ConnectionConformanceTarget<Tx>,
  work: (context: Context<Tx>) => Promise<void>,
): Promise<void> {
  const fixture = await target.setUp();
  const { sql } = fixture.connection;
  const tableName = `outbox_conn_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
  let store: OutboxStore | undefined;
  try {
    await createOutboxTable(sql, { tableName, with: OUTBOX_STEP_OPTIONS });
    store = await createOutboxStore(
      sql,
      {
        tableName,
        schema: null,
        ordering: { enabled: true, onDeadLetter: 'block' },
        dispatcher: { dbTimeoutMs: 10_000 },
      },
      { enabled: true, notify: false },
    );
    const opened = store;
    await work({
      fixture,
      store: opened,
      async enqueue(tx) {
        const message = row();
        // join() may refuse at once, or the first statement on the handle may.
        await opened.insert(fixture.connection.join(tx), [message], true);
        return message.messageId;
      },
      async stored() {
        const { rows } = await sql.query<{ message_id: unknown }>(
          `SELECT message_id FROM ${tableName}`,
        );
        return rows.map((r) => messageIdText(r.message_id));
      },
      async undelivered() {
        const { rows } = await sql.query<{ n: unknown }>(
          `SELECT COUNT(*) AS n FROM ${tableName} WHERE status <> 'delivered'`,
        );
        return Number(rows[0]?.n ?? 0);
      },
    });
  } finally {
    await store?.close();
    for (const statement of outboxTableDropDdl(outboxDialectOf(sql.databaseType), {
      tableName,
    })) {
      await sql.query(statement).catch(() => undefined);
    }
    await fixture.tearDown();
  }
}

/** `attempt` must fail with `kind`, with a message that says what to pass instead. */
async function expectRefused(
  attempt: () => Promise<unknown>,
  kind: typeof OutboxError,
  what: string,
): Promise<void> {
  let failure: unknown;
  try {
    await attempt();
  } catch (error) {
    failure = error;
  }
  ok(failure !== undefined, `${what} was accepted`);
  ok(
    failure instanceof kind,
    `${what} was refused with ${describe(failure)}, expected ${kind.name}`,
  );
  ok(failure.message.length > 40, `${what} was refused without saying what to pass instead`);
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/** The enqueue with a handle taken from `capture` once its transaction has ended. */
async function afterEnd<Tx>(context: Context<Tx>, rollback: boolean): Promise<void> {
  let kept: { tx: Tx } | undefined;
  await context.fixture.inTransaction(async (tx) => {
    kept = { tx };
    // A statement of the library's own first, so the transaction is really begun.
    await context.enqueue(tx);
  }, rollback);
  ok(kept !== undefined, 'the transaction ran');
  const before = await context.stored();
  const handle = kept.tx;
  await expectRefused(
    () => context.enqueue(handle),
    OutboxTransactionRequiredError,
    `a transaction that has ${rollback ? 'rolled back' : 'committed'}`,
  );
  const after = await context.stored();
  ok(
    after.length === before.length,
    `the refused enqueue wrote ${after.length - before.length} row(s) after the transaction ended`,
  );
}

/**
 * Watches for errors no caller could catch (an 'error' event without a listener, a rejection
 * without a handler) while `work` runs: each would end an app's process.
 */
async function withoutUncaught(work: () => Promise<void>): Promise<void> {
  const uncaught: unknown[] = [];
  const record = (error: unknown): void => {
    uncaught.push(error);
  };
  // An 'error' event nobody listens to is how a lost connection ends a process. It is caught
  // where it is emitted, not by a process 'uncaughtException' listener: a test runner (jest)
  // gives the test its own `process` and keeps the real one's listeners to itself, so a listener
  // of ours would never hear it and the case could not fail. Put back when the work ends.
  // eslint-disable-next-line @typescript-eslint/unbound-method
  const emit = EventEmitter.prototype.emit;
  EventEmitter.prototype.emit = function (
    this: EventEmitter,
    name: string | symbol,
    ...args: unknown[]
  ): boolean {
    if (name === 'error' && this.listenerCount('error') === 0) {
      record(args[0] ?? new Error("an 'error' event without an error"));
      return false;
    }
    return emit.call(this, name, ...args);
  };
  process.on('uncaughtException', record);
  process.on('unhandledRejection', record);
  try {
    await work();
    // An 'error' event of a socket closed by the server may come a moment later.
    await sleep(300);
  } finally {
    EventEmitter.prototype.emit = emit;
    process.removeListener('uncaughtException', record);
    process.removeListener('unhandledRejection', record);
  }
  ok(
    uncaught.length === 0,
    `${uncaught.length} error(s) reached the process, which would end it: ${uncaught.map(describe).join('; ')}`,
  );
}

/** How long the drain of the killed-connections case may take before it fails. */
const DRAIN_MS = 30_000;

/** A call that did not answer within the case's time: fails the case at once, never retried. */
class UnansweredError extends Error {}

/** `promise`, or a failure naming `what` once `ms` have passed without an answer. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(new UnansweredError(`connection conformance: ${what} did not answer in ${ms} ms`)),
      ms,
    );
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** `attempt` until it resolves, for up to `ms`: the connection must come back by itself. */
async function recovers<T>(attempt: () => Promise<T>, ms: number, what: string): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      return await attempt();
    } catch (error) {
      last = error;
      await sleep(100);
    }
  }
  throw new Error(`connection conformance: ${what} still fails after ${ms} ms: ${describe(last)}`);
}

function notApplicable<Tx>(
  name: string,
  reason: string,
  absent: (fixture: ConnectionConformanceFixture<Tx>) => boolean,
): ConnectionConformanceCase<Tx> {
  return {
    name: `${name} (not applicable: ${reason})`,
    async run(target) {
      const fixture = await target.setUp();
      try {
        ok(absent(fixture), `the target says why it has no handle for this, yet gives one`);
      } finally {
        await fixture.tearDown();
      }
    },
  };
}

/** When, relative to the moment it is called, `at` starts its work. */
type Moment = (start: () => void) => void;

const MOMENTS: readonly { readonly name: string; readonly at: Moment }[] = [
  { name: 'at once', at: (start) => start() },
  ...[1, 2, 3, 5, 8].map((depth) => ({
    name: `after ${depth} microtask(s)`,
    at: (start: () => void) => afterMicrotasks(depth, start),
  })),
  { name: 'on the next tick', at: (start) => process.nextTick(start) },
  ...[1, 2, 3].map((depth) => ({
    name: `after ${depth} setImmediate(s)`,
    at: (start: () => void) => afterImmediates(depth, start),
  })),
  { name: 'after a 0 ms timer', at: (start) => void setTimeout(start, 0) },
];

function afterMicrotasks(depth: number, start: () => void): void {
  if (depth === 0) start();
  else queueMicrotask(() => afterMicrotasks(depth - 1, start));
}

function afterImmediates(depth: number, start: () => void): void {
  if (depth === 0) start();
  else setImmediate(() => afterImmediates(depth - 1, start));
}

/** An enqueue started and not awaited: its message id, and how it ended. */
interface Unawaited {
  readonly moment: string;
  readonly messageId: Promise<string | undefined>;
}

/** Starts `context.enqueue(tx)` at `moment`, without awaiting it; a refusal answers undefined. */
function unawaited<Tx>(context: Context<Tx>, tx: Tx, moment: (typeof MOMENTS)[number]): Unawaited {
  const messageId = new Promise<string | undefined>((resolve) => {
    moment.at(() => {
      // join() may throw at once: that is a refusal too.
      Promise.resolve()
        .then(() => context.enqueue(tx))
        .then(resolve, () => resolve(undefined));
    });
  });
  return { moment: moment.name, messageId };
}

/** Waits for enqueues that were not awaited, failing rather than hanging on one that never ends. */
async function settled(started: readonly Unawaited[]): Promise<void> {
  const pending = new Set(started.map((s) => s.moment));
  const all = Promise.all(
    started.map(async (s) => {
      await s.messageId;
      pending.delete(s.moment);
    }),
  );
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), 15_000);
  });
  try {
    const outcome = await Promise.race([all.then(() => 'done' as const), deadline]);
    ok(outcome === 'done', `enqueues started ${[...pending].join(', ')} never ended`);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * An enqueue the app does not await before its transaction rolls back (the business code failed
 * and the library rolled back at once): whenever its statements reach the connection, nothing
 * of it may stay. Run in a transaction of its own for each moment the rollback may come at.
 */
async function unawaitedBeforeRollback<Tx>(context: Context<Tx>): Promise<void> {
  const waits: readonly { readonly name: string; readonly wait: () => Promise<void> }[] = [
    { name: 'in the same tick', wait: () => Promise.resolve() },
    { name: 'after a microtask', wait: () => new Promise((resolve) => queueMicrotask(resolve)) },
    { name: 'after setImmediate', wait: () => new Promise((resolve) => setImmediate(resolve)) },
    { name: 'after a 1 ms timer', wait: () => new Promise((resolve) => setTimeout(resolve, 1)) },
  ];
  for (const begun of [false, true]) {
    for (const { name, wait } of waits) {
      const started: Unawaited[] = [];
      await context.fixture.inTransaction(async (tx) => {
        // With a statement of the app's first, or as the transaction's first statement.
        if (begun) await context.enqueue(tx);
        started.push(unawaited(context, tx, MOMENTS[0] as (typeof MOMENTS)[number]));
        await wait();
      }, true);
      await settled(started);
      const stored = await context.stored();
      ok(
        stored.length === 0,
        `${stored.length} message(s) stayed after the rollback of a transaction ${
          begun ? 'that had run a statement' : 'with no statement before'
        }, when the enqueue was not awaited and the rollback came ${name}`,
      );
    }
  }
}

/**
 * Enqueues started as the transaction ends: before the library sends its ROLLBACK, while the
 * ROLLBACK is on its way and unanswered, and after it. An enqueue that sees the transaction as
 * still open and writes after the ROLLBACK would commit on its own; none may stay.
 */
async function duringRollback<Tx>(context: Context<Tx>): Promise<void> {
  for (let round = 0; round < 3; round += 1) {
    const started: Unawaited[] = [];
    await context.fixture.inTransaction(async (tx) => {
      await context.enqueue(tx);
      for (const moment of MOMENTS) started.push(unawaited(context, tx, moment));
    }, true);
    await settled(started);
    const stored = await context.stored();
    ok(
      stored.length === 0,
      `${stored.length} message(s) stayed after a rollback with enqueues started as it was sent`,
    );
  }
}

const UNAWAITED = 'an enqueue not awaited before the transaction rolls back: nothing of it stays';
const DURING_ROLLBACK =
  'an enqueue started while the rollback is sent or on its way: nothing of it stays';
const ROOT_HANDLE = 'refuses the library’s root handle instead of a transaction, writing nothing';
const FOREIGN =
  'a transaction of another pool or database: refused, or the message shares that transaction’s fate';
const NESTED = 'a nested transaction or savepoint: the message goes with the outer transaction';
const KILLED =
  'survives its database connections being ended during a drain: statements fail, nothing reaches the process, work resumes';

/**
 * The cases every connection (`OutboxConnection`) must pass, on each database it runs on: the
 * handles that are not the caller's open transaction are refused (or, where the message would
 * still commit or roll back with the caller's writes, accepted), and a connection the database
 * ends takes neither the process nor the outbox down. Run each in the test runner:
 *
 * ```ts
 * for (const c of connectionConformanceCases(target)) it(c.name, () => c.run(target), 60_000);
 * ```
 */
export function connectionConformanceCases<Tx>(
  target: ConnectionConformanceTarget<Tx>,
): readonly ConnectionConformanceCase<Tx>[] {
  const without = target.without ?? {};
  const cases: ConnectionConformanceCase<Tx>[] = [
    {
      name: ROOT_HANDLE,
      run: (t) =>
        withTable(t, async (context) => {
          const root = context.fixture.rootHandle as Tx;
          await expectRefused(
            () => context.enqueue(root),
            OutboxTransactionRequiredError,
            'the root handle',
          );
          // Again once the library has handed out (and taken back) connections, as in an app
          // that ran a migration or a health check at start.
          await context.fixture.inTransaction((tx) => context.enqueue(tx));
          await context.fixture.inTransaction((tx) => context.enqueue(tx), true);
          const before = await context.stored();
          await expectRefused(
            () => context.enqueue(root),
            OutboxTransactionRequiredError,
            'the root handle, after the library handed out connections',
          );
          ok(before.length === 1, `the committed enqueue left ${before.length} row(s), not 1`);
          ok((await context.stored()).length === 1, 'the refused enqueue wrote a row');
        }),
    },
    {
      name: 'refuses a transaction that has committed, writing nothing',
      run: (t) => withTable(t, (context) => afterEnd(context, false)),
    },
    {
      name: 'refuses a transaction that has rolled back, writing nothing',
      run: (t) => withTable(t, (context) => afterEnd(context, true)),
    },
    {
      name: UNAWAITED,
      run: (t) => withTable(t, (context) => unawaitedBeforeRollback(context)),
    },
    {
      name: DURING_ROLLBACK,
      run: (t) => withTable(t, (context) => duringRollback(context)),
    },
    without.foreignTransaction !== undefined
      ? notApplicable(FOREIGN, without.foreignTransaction, (f) => !f.inForeignTransaction)
      : {
          name: FOREIGN,
          run: (t) =>
            withTable(t, (context) => {
              const foreign = context.fixture.inForeignTransaction?.bind(context.fixture);
              ok(foreign !== undefined, 'the fixture gives no foreign transaction');
              return sharesFate(context, 'a foreign transaction', foreign);
            }),
        },
    without.nestedTransaction !== undefined
      ? notApplicable(NESTED, without.nestedTransaction, (f) => !f.inNestedTransaction)
      : {
          name: NESTED,
          run: (t) =>
            withTable(t, (context) => {
              const nested = context.fixture.inNestedTransaction?.bind(context.fixture);
              ok(nested !== undefined, 'the fixture gives no nested transaction');
              return sharesFate(context, 'a nested transaction (its outer one)', nested);
            }),
        },
    without.killedConnections !== undefined
      ? notApplicable(KILLED, without.killedConnections, (f) => !f.killConnections)
      : {
          name: KILLED,
          run: (t) => withTable(t, (context) => drainThroughKill(context)),
        },
  ];
  return cases;
}

/**
 * An enqueue inside `begin`'s transaction, rolled back and then committed: refused with an
 * `OutboxError` (nothing written), or the message is in the table exactly when it committed.
 */
async function sharesFate<Tx>(
  context: Context<Tx>,
  what: string,
  begin: (work: (tx: Tx) => Promise<void>, rollback: boolean) => Promise<void>,
): Promise<void> {
  for (const rollback of [true, false]) {
    let written: string | undefined;
    let refusal: unknown;
    await begin(async (tx) => {
      try {
        written = await context.enqueue(tx);
      } catch (error) {
        refusal = error;
      }
    }, rollback);
    const stored = await context.stored();
    if (written === undefined) {
      ok(
        refusal instanceof OutboxError,
        `${what} was refused with ${describe(refusal)}, not an OutboxError`,
      );
      ok(stored.length === 0, `the enqueue ${what} refused wrote a row`);
    } else {
      ok(
        stored.includes(written) === !rollback,
        rollback
          ? `a message enqueued in ${what} that rolled back is in the table`
          : `a message enqueued in ${what} that committed is not in the table`,
      );
    }
  }
}

/**
 * A drain on the store (claim, settle, as the dispatcher does) with every connection of the port
 * ended by the server part-way: inside an open transaction of the port between two statements,
 * on the LISTEN connection, and on idle pooled ones. Nothing may reach the process; a failed
 * call fails like an outage, and the drain then finishes on new connections.
 */
async function drainThroughKill<Tx>(context: Context<Tx>): Promise<void> {
  const { fixture, store } = context;
  const { sql } = fixture.connection;
  const kill = fixture.killConnections?.bind(fixture);
  ok(kill !== undefined, 'the fixture cannot end its connections');
  const total = 120;
  for (let done = 0; done < total; done += 30) {
    await fixture.inTransaction(async (tx) => {
      const rows = Array.from({ length: 30 }, () => row());
      await store.insert(fixture.connection.join(tx), rows, true);
    });
  }
  await withoutUncaught(async () => {
    let lost = 0;
    const unlisten =
      sql.listen === undefined
        ? undefined
        : await sql.listen(
            `outbox_conformance_${randomUUID().replace(/-/g, '').slice(0, 8)}`,
            () => undefined,
            () => {
              lost += 1;
            },
          );
    let settledOnce!: () => void;
    const firstSettle = new Promise<void>((resolve) => (settledOnce = resolve));
    let killed = false;
    let settledAny = false;
    let failures = 0;
    try {
      // A transaction of the port left open across the kill, part-way through the drain: its
      // next statement itself must fail, not hang or succeed. Its own outcome is what is judged:
      // a port that swallowed the failure would still see the transaction fail at COMMIT.
      let statementAfterKill = 'not run' as 'not run' | 'succeeded' | 'failed';
      const held = sql
        .transaction(async (tx) => {
          await tx.query('SELECT 1');
          await firstSettle;
          if (!settledAny) return;
          await kill();
          killed = true;
          await sleep(300);
          try {
            await tx.query('SELECT 1');
            statementAfterKill = 'succeeded';
          } catch (error) {
            statementAfterKill = 'failed';
            throw error;
          }
        })
        .then(
          () => 'committed',
          () => 'failed',
        );
      const deadline = Date.now() + DRAIN_MS;
      // Every call of the drain is bounded by what is left of the case's time: one that never
      // answers fails the case with its name, rather than hanging it to the runner's timeout.
      const bounded = <T>(call: Promise<T>, what: string): Promise<T> =>
        within(call, Math.max(deadline - Date.now(), 1_000), what);
      let lastFailure: unknown;
      while (Date.now() < deadline) {
        try {
          const batch = await bounded(
            store.claim({ limit: 20, owner: 'conformance', leaseMs: 2_000 }),
            'a claim',
          );
          if (batch.records.length === 0) {
            if (killed && (await bounded(context.undelivered(), 'a count')) === 0) break;
            // A settle lost with its connection leaves its rows leased until the lease ends.
            await bounded(store.releaseExpired(), 'a release of expired leases');
            await sleep(100);
            continue;
          }
          // Slow enough that the kill lands while claims and settles are under way.
          if (!killed) await sleep(50);
          await bounded(
            store.settle(
              batch.token,
              {
                delivered: batch.records.map((r) => r.id),
                retry: [],
                dead: [],
                release: [],
                advancedKeys: [],
              },
              false,
            ),
            'a settle',
          );
          settledAny = true;
          settledOnce();
        } catch (error) {
          if (error instanceof UnansweredError) throw error;
          failures += 1;
          lastFailure = error;
          // The dispatcher pauses on a database outage; so does this drain.
          await sleep(200);
        }
      }
      ok(
        settledAny,
        `no settle succeeded in ${DRAIN_MS} ms, before any connection was ended (${failures} failed calls; the last: ${describe(lastFailure)})`,
      );
      // Let the held transaction go on (or end, if nothing settled) and judge it.
      settledOnce();
      const heldOutcome = await within(held, 10_000, 'the transaction held across the kill');
      ok(
        statementAfterKill !== 'succeeded',
        'a statement on a connection the server ended succeeded (the port swallowed its failure?)',
      );
      ok(
        statementAfterKill === 'failed',
        `the statement after the kill never ran (the transaction held across the kill ${heldOutcome} before it)`,
      );
      ok(heldOutcome === 'failed', 'a transaction whose connection the server ended committed');
      ok(
        sql.listen === undefined || lost === 1,
        `the LISTEN connection's loss was reported ${lost} times, not once`,
      );
      const left = await context.undelivered();
      ok(
        left === 0,
        `${left} of ${total} messages were not delivered after the port's connections were ended (${failures} failed calls)`,
      );
      // And the port answers again, on new connections.
      await recovers(() => sql.query('SELECT 1'), 5_000, 'a statement after the kill');
      await recovers(
        () => sql.transaction((tx) => tx.query('SELECT 1')),
        5_000,
        'a transaction after the kill',
      );
    } finally {
      settledOnce();
      await unlisten?.().catch(() => undefined);
    }
  });
}
