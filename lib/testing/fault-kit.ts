import { UuidV7Generator } from '../message/uuidv7';
import { checkDelivery, describeDeliveryReport, type CommittedMessage } from './delivery-check';
import { DispatcherProcess } from './dispatcher.process';
import { FaultProxy, type FaultProxyEndpoint } from './fault.proxy';

/**
 * Where your dispatcher must reach the database and the broker in a case: the kit's proxies in
 * front of the target's servers (absent where the target names none).
 */
export interface FaultKitEndpoints {
  readonly database?: FaultProxyEndpoint;
  readonly broker?: FaultProxyEndpoint;
}

/** A message the kit asks you to enqueue: pass its `messageId` and `key` to `enqueue()`. */
export interface FaultKitMessage {
  readonly messageId: string;
  readonly key: string;
  readonly type: string;
  readonly payload: { readonly n: number };
}

/** Your set-up for one case: a table (or a clean one), a queue, a consumer recording arrivals. */
export interface FaultKitFixture {
  /**
   * Starts your dispatcher in a process of its own (`DispatcherProcess.start` with your entry
   * file), on this fixture's table and queue, reaching the database and the broker only at
   * `endpoints` (pass them with `faultKitEnv(endpoints)` and read them in the entry file with
   * `faultKitEndpoints()`). Called again after a kill, for the dispatcher that takes over.
   */
  startDispatcher(endpoints: FaultKitEndpoints): Promise<DispatcherProcess>;
  /**
   * Enqueues `messages` in one transaction of your app (on its own connection, not through the
   * endpoints), with their `messageId` and `key`, and commits it; rolls it back instead when
   * `rollback` is true.
   */
  enqueue(messages: readonly FaultKitMessage[], rollback: boolean): Promise<void>;
  /** The message ids your consumer received so far, in arrival order, duplicates included. */
  received(): readonly string[];
  /**
   * Closes what `setUp` opened: the consumer, the app, and the table with everything the outbox
   * made for it (`dropOutboxTables` from `nestjs-outbox`).
   */
  tearDown(): Promise<void>;
}

/** Your system under faults: its servers, and a fresh fixture per case. */
export interface FaultKitTarget {
  readonly name: string;
  /** The database server your dispatcher uses; omitted (SQLite: a file), its cases do not apply. */
  readonly database?: FaultProxyEndpoint;
  /** The broker your dispatcher publishes to; omitted, its cases do not apply. */
  readonly broker?: FaultProxyEndpoint;
  setUp(): Promise<FaultKitFixture>;
  /** Messages committed before each fault (the backlog it cuts into), as many after. @default 600 */
  readonly messages?: number;
  /** Ordering keys the messages are spread over. @default 20 */
  readonly keys?: number;
  /** How long a cut or a freeze lasts. @default 2000 */
  readonly outageMs?: number;
  /** How long a case waits for every message after the fault. @default 60000 */
  readonly deliveryTimeoutMs?: number;
}

/** One case of the suite: throws an `Error` saying what was lost, duplicated or reordered. */
export interface FaultKitCase {
  readonly name: string;
  /** Why the case does not apply to the target (also in `name`); undefined when it does. */
  readonly notApplicable?: string;
  run(target: FaultKitTarget): Promise<void>;
}

const ENV_DATABASE = 'OUTBOX_FAULT_KIT_DATABASE';
const ENV_BROKER = 'OUTBOX_FAULT_KIT_BROKER';

/** The endpoints as environment variables for your dispatcher's process (`DispatcherProcess`'s `env`). */
export function faultKitEnv(endpoints: FaultKitEndpoints): Record<string, string> {
  const env: Record<string, string> = {};
  if (endpoints.database !== undefined)
    env[ENV_DATABASE] = `${endpoints.database.host}:${endpoints.database.port}`;
  if (endpoints.broker !== undefined)
    env[ENV_BROKER] = `${endpoints.broker.host}:${endpoints.broker.port}`;
  return env;
}

function endpointOf(name: string, value: string | undefined): FaultProxyEndpoint | undefined {
  if (value === undefined || value === '') return undefined;
  const match = /^(.+):(\d+)$/.exec(value);
  if (match === null) throw new Error(`${name}=${value}: expected host:port (see faultKitEnv)`);
  return { host: match[1] as string, port: Number(match[2]) };
}

/** In your dispatcher's entry file: the endpoints `faultKitEnv` passed to it. */
export function faultKitEndpoints(
  env: Readonly<Record<string, string | undefined>> = process.env,
): FaultKitEndpoints {
  return {
    database: endpointOf(ENV_DATABASE, env[ENV_DATABASE]),
    broker: endpointOf(ENV_BROKER, env[ENV_BROKER]),
  };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Messages of one transaction: one per key, so a key's order is the transactions' order. */
const TX_SIZE_CAP = 50;
/** Messages of the one transaction each case rolls back. */
const ROLLED_BACK = 10;
/** Time left after the last expected arrival for a late duplicate to show up. */
const QUIET_MS = 1_000;
/** How long the kit waits for a first share of the backlog to arrive before the fault. */
const FIRST_ARRIVALS_MS = 60_000;

/** What a fault does to a running case, and when it is over. */
interface Fault {
  readonly name: string;
  readonly needs?: 'database' | 'broker';
  /**
   * Injects the fault, commits `during()` while it lasts, ends it; resolves once the system is
   * whole again (the proxy restored, the replacement dispatcher running).
   */
  inject(run: CaseRun, during: () => Promise<void>): Promise<void>;
}

/** The state of one case while it runs. */
class CaseRun {
  readonly committed: CommittedMessage[] = [];
  readonly rolledBack: string[] = [];
  readonly proxies: { database?: FaultProxy; broker?: FaultProxy } = {};
  readonly dispatchers: DispatcherProcess[] = [];
  private n = 0;
  private readonly ids = new UuidV7Generator();

  constructor(
    readonly target: FaultKitTarget,
    readonly fixture: FaultKitFixture,
  ) {}

  get endpoints(): FaultKitEndpoints {
    return { database: this.proxies.database?.endpoint, broker: this.proxies.broker?.endpoint };
  }

  get outageMs(): number {
    return this.target.outageMs ?? 2_000;
  }

  async startDispatcher(): Promise<DispatcherProcess> {
    const dispatcher = await this.fixture.startDispatcher(this.endpoints);
    this.dispatchers.push(dispatcher);
    return dispatcher;
  }

  /** Commits `count` messages over the target's keys, with one rolled-back transaction among them. */
  async commit(count: number): Promise<void> {
    const keys = this.target.keys ?? 20;
    const perTx = Math.max(1, Math.min(keys, TX_SIZE_CAP));
    let left = count;
    let rolledBackOnce = false;
    while (left > 0) {
      const size = Math.min(perTx, left);
      const batch = this.batch(size, keys);
      await this.fixture.enqueue(batch, false);
      for (const m of batch) this.committed.push({ messageId: m.messageId, key: m.key });
      left -= size;
      if (!rolledBackOnce && left <= count / 2) {
        rolledBackOnce = true;
        const ghosts = this.batch(ROLLED_BACK, keys);
        await this.fixture.enqueue(ghosts, true);
        this.rolledBack.push(...ghosts.map((m) => m.messageId));
      }
    }
  }

  private batch(size: number, keys: number): FaultKitMessage[] {
    return Array.from({ length: size }, () => {
      const n = this.n++;
      return {
        messageId: this.ids.next(),
        key: `fault-kit-${n % keys}`,
        type: 'fault-kit.checked',
        payload: { n },
      };
    });
  }

  /** How many committed messages reached the consumer, at least once. */
  arrived(): number {
    const got = new Set(this.fixture.received());
    return this.committed.filter((m) => got.has(m.messageId)).length;
  }

  /** Waits until `done()`; false once `timeoutMs` have passed without it. */
  async within(done: () => boolean, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!done()) {
      if (Date.now() > deadline) return false;
      await sleep(5);
    }
    return true;
  }

  /** How far the case got, for a failure message. */
  progress(): string {
    return `${this.arrived()} of ${this.committed.length} committed messages arrived`;
  }

  lastOutput(): string {
    const last = this.dispatchers[this.dispatchers.length - 1];
    const output = last?.output.slice(-2_000) ?? '';
    return output === '' ? '' : `\nthe dispatcher's last output:\n${output}`;
  }

  /** Fails unless the dispatcher reaches `which` through the kit's proxy. */
  proxied(which: 'database' | 'broker'): FaultProxy {
    const proxy = this.proxies[which];
    if (proxy === undefined || proxy.connections === 0)
      throw new Error(
        `${this.target.name}: the dispatcher holds no connection to the ${which} through the kit's proxy; its entry file must connect to the ${which} at the endpoint startDispatcher() was given (faultKitEndpoints())`,
      );
    return proxy;
  }

  async close(): Promise<void> {
    const failures: unknown[] = [];
    for (const d of this.dispatchers) await d.stop(10_000).catch((e: unknown) => failures.push(e));
    for (const p of Object.values(this.proxies)) await p.close();
    await this.fixture.tearDown().catch((e: unknown) => failures.push(e));
    if (failures.length > 0) throw failures[0];
  }
}

/** Cuts the link to `which` (reset, or frozen) for the target's outage time, then restores it. */
function linkFault(which: 'database' | 'broker', how: 'reset' | 'freeze', name: string): Fault {
  return {
    name,
    needs: which,
    async inject(run, during) {
      const proxy = run.proxied(which);
      if (how === 'reset') proxy.cut();
      else proxy.freeze();
      const ends = Date.now() + run.outageMs;
      await during();
      await sleep(Math.max(0, ends - Date.now()));
      proxy.restore();
    },
  };
}

const killed: Fault = {
  name: 'dispatcher SIGKILLed mid-drain, a new one takes over',
  async inject(run, during) {
    const doomed = run.dispatchers[run.dispatchers.length - 1] as DispatcherProcess;
    const exit = await doomed.kill('SIGKILL');
    if (exit.signal !== 'SIGKILL')
      throw new Error(
        `${run.target.name}: the dispatcher ended (${JSON.stringify(exit)}) before the kill`,
      );
    await during();
    await run.startDispatcher();
  },
};

const FAULTS: readonly Fault[] = [
  linkFault('database', 'reset', 'database connections reset mid-drain'),
  linkFault('database', 'freeze', 'database link frozen mid-drain (calls hang, then resume)'),
  linkFault('broker', 'reset', 'broker connections reset mid-drain'),
  killed,
];

async function runFault(target: FaultKitTarget, fault: Fault): Promise<void> {
  const fixture = await target.setUp();
  const run = new CaseRun(target, fixture);
  try {
    if (target.database !== undefined)
      run.proxies.database = await FaultProxy.start(target.database);
    if (target.broker !== undefined) run.proxies.broker = await FaultProxy.start(target.broker);
    const backlog = target.messages ?? 600;
    await run.commit(backlog);
    await run.startDispatcher();
    // The fault lands mid-drain: after a first share of the backlog went out, before the rest.
    const share = Math.max(1, Math.floor(backlog / 5));
    if (!(await run.within(() => run.arrived() >= share, FIRST_ARRIVALS_MS)))
      throw new Error(
        `${target.name}: the first ${share} messages did not arrive within ${FIRST_ARRIVALS_MS} ms (${run.progress()})${run.lastOutput()}`,
      );
    if (run.arrived() >= run.committed.length)
      throw new Error(
        `${target.name}: the dispatcher drained all ${backlog} messages before the fault could land: raise \`messages\``,
      );
    await fault.inject(run, () => run.commit(backlog));
    // Only a message that had reached the consumer before the system was whole again can have
    // been published by a dispatcher that never learnt the outcome: those may come twice.
    const beforeHeal = new Set(fixture.received());
    const timeoutMs = target.deliveryTimeoutMs ?? 60_000;
    const complete = await run.within(() => run.arrived() === run.committed.length, timeoutMs);
    await sleep(QUIET_MS);
    const report = checkDelivery({
      committed: run.committed,
      received: fixture.received().map((messageId) => ({ messageId })),
      rolledBack: run.rolledBack,
      allowedDuplicates: [{ messageIds: beforeHeal, reason: fault.name }],
    });
    if (!report.ok)
      throw new Error(
        `${target.name}, ${fault.name}: ${complete ? 'every message arrived, but' : `after ${timeoutMs} ms,`}\n${describeDeliveryReport(report)}${complete ? '' : run.lastOutput()}`,
      );
  } finally {
    await run.close();
  }
}

/**
 * The fault kit: your own module set-up, broker and database under faults, as cases any test
 * runner can run. Each case commits a backlog (and one transaction it rolls back), starts your
 * dispatcher, and once part of the backlog went out injects its fault (a database or broker
 * link reset or frozen through a `FaultProxy`, or the dispatcher process SIGKILLed and another
 * started), commits more while it lasts, and then checks with `checkDelivery` that nothing was
 * lost, nothing rolled back arrived, each key kept its commit order, and only messages that
 * arrived before the fault ended came twice. A case that does not apply to the target (no
 * database server to cut: SQLite) says so in its name and `notApplicable`.
 *
 * ```ts
 * describe(target.name, () => {
 *   for (const c of faultKitCases(target))
 *     (c.notApplicable === undefined ? it : it.skip)(c.name, () => c.run(target), 180_000);
 * });
 * ```
 */
export function faultKitCases(target: FaultKitTarget): FaultKitCase[] {
  return FAULTS.map((fault) => {
    const missing = fault.needs !== undefined && target[fault.needs] === undefined;
    const notApplicable = missing
      ? `not applicable: the target names no ${fault.needs} server to cut`
      : undefined;
    return {
      name: notApplicable === undefined ? fault.name : `${fault.name} (${notApplicable})`,
      notApplicable,
      run: (t: FaultKitTarget) =>
        notApplicable === undefined ? runFault(t, fault) : Promise.resolve(),
    };
  });
}
