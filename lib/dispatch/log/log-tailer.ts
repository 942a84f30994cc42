import { randomUUID } from 'node:crypto';
import type { OutboxBatchReport } from '../../observers/outbox-observer.interface';
import { describeError } from '../../internal/describe-error';
import type { ClaimedIds, OutboxStore } from '../../store/ports/outbox-store.port';
import type { LoggedBatch, OutboxLogSource } from '../../store/ports/outbox-log-source.port';
import type { LeasedBatch } from '../poll/claimer';
import type { DatabaseWatchdog } from '../health/database-watchdog';
import type { DispatcherLog } from '../dispatcher-log';
import type { OwnerLease } from '../health/owner-liveness';

/**
 * When the table is swept again for ids it did not show (it is also swept at once): a commit
 * the log handed over a moment before a new snapshot sees it is visible by then.
 */
const UNSEEN_SWEEP_MS = 100;

/** What the tailer needs from its dispatcher. */
export interface LogTailerParts {
  readonly source: OutboxLogSource;
  readonly store: Required<Pick<OutboxStore, 'claimIds'>>;
  readonly watchdog: DatabaseWatchdog;
  readonly log: DispatcherLog;
  readonly owner: string;
  readonly leaseMs: number;
  readonly batchSize: number;
  /** Ordering on: a key's messages go one run (of up to `maxRun`) at a time, in log order. */
  readonly ordered: boolean;
  readonly maxRun: number;
  /** Shutting down or paused by an outage: lease nothing more, leave the rest to the table. */
  readonly holdsOff: () => boolean;
  /** Publishes a leased batch and settles the outcome; never throws (the dispatcher's). */
  readonly deliver: (batch: LeasedBatch, started: number) => Promise<OutboxBatchReport>;
  /** Some rows were left to the table: the table's path (the poll) should look soon. */
  readonly handOff: () => void;
  /** The table's path should look in `delayMs` (rows left to it become due, or visible, then). */
  readonly sweepAfter: (delayMs: number) => void;
  /** A database call failed: pause as a failed claim does. */
  readonly pause: (error: unknown, what: string) => void;
  /** The lease token to write (OwnerLiveness); a random one when left out. */
  readonly lease?: () => OwnerLease;
  /**
   * A lease by id that failed or was given up on, still running as `call`: it may have
   * committed with its answer lost. Given back by token with the claim loop's (LostClaims).
   */
  readonly lostLease: (token: string, call: Promise<unknown> | undefined) => void;
}

/**
 * The dispatcher's side of log tailing: takes the committed inserts the log source hands over
 * (in commit order), leases them by id (`claimIds`) and delivers them through the dispatcher's
 * own publish, judge and settle; then acknowledges the log position. What it cannot lease now
 * (a key held in the table by a message backing off or dead, rows leased by another process,
 * not due yet) it leaves to the table, whose poll runs on beside it: see ARCHITECTURE.md,
 * "Log tailing: two paths, one owner".
 */
export class LogTailer {
  private readonly abort = new AbortController();
  private running: Promise<void> | undefined;

  constructor(private readonly parts: LogTailerParts) {}

  start(): void {
    this.running ??= this.parts.source
      .run((batch) => this.handle(batch), this.abort.signal)
      .catch((error: unknown) =>
        this.parts.log.error(`Log tailing stopped on an error: ${describeError(error)}`),
      );
  }

  /** Stops reading; resolves once the batch being handled has been delivered and settled. */
  async stop(): Promise<void> {
    this.abort.abort();
    await this.running;
  }

  /** One run of committed inserts: leased and delivered, or left to the table; then acknowledged. */
  private async handle(batch: LoggedBatch): Promise<void> {
    const { ordered, batchSize, maxRun } = this.parts;
    // Keyless messages (and every message without ordering) have no order to keep.
    const free: string[] = [];
    const keys = new Map<string, string[]>();
    for (const insert of batch.inserts) {
      if (!ordered || insert.key === null) free.push(insert.id);
      else {
        const queue = keys.get(insert.key);
        if (queue === undefined) keys.set(insert.key, [insert.id]);
        else queue.push(insert.id);
      }
    }
    // Transactions past the source's bound are the table's whole. A later transaction's message
    // of one of their keys is not leased here before their rows go out: claimIds leases a row
    // only when every earlier blocking row of its key is in the same lease, so it is refused
    // while those pending rows wait, and left to the table too, whose sweep claims heads of key
    // in id (commit) order. The same rule keeps order behind any key held in the table.
    let handedOff = batch.leftToTable ?? 0;
    while (free.length > 0 || keys.size > 0) {
      if (this.parts.holdsOff()) {
        if (this.abort.signal.aborted) return; // unacknowledged: read again after a restart
        // An outage: the table's path takes them after the pause, with no attempt spent here.
        handedOff += free.length + [...keys.values()].reduce((n, q) => n + q.length, 0);
        break;
      }
      // Keyless ids first, then a run from the front of each key's queue.
      const picked = free.splice(0, batchSize);
      const freePicked = picked.length;
      const runs = new Map<string, string[]>();
      for (const [key, queue] of keys) {
        if (picked.length >= batchSize) break;
        const run = queue.splice(0, Math.min(maxRun, batchSize - picked.length));
        runs.set(key, run);
        picked.push(...run);
      }
      const started = performance.now();
      const leased = await this.lease(picked);
      if (leased === undefined) {
        // The database failed (the dispatcher paused); the rows stay in the table, pending.
        handedOff += picked.length + free.length;
        handedOff += [...keys.values()].reduce((n, q) => n + q.length, 0);
        break;
      }
      const taken = new Set(leased.records.map((r) => r.id));
      // Ids the table does not show are not waited for here: most never will be (inserted and
      // deleted in one transaction, XA, a replay after delete-at-settle), and the log's later
      // work would wait behind them. A commit not visible yet is pending in the table once it
      // is, and the table's path takes it: swept at once and again shortly.
      if (leased.unseen.length > 0) this.parts.sweepAfter(UNSEEN_SWEEP_MS);
      // Delayed messages and retries are refused until due: the table's path looks when the
      // first is due rather than at its next poll.
      if (leased.notDueForMs !== undefined) this.parts.sweepAfter(leased.notDueForMs);
      for (const id of picked.slice(0, freePicked)) if (!taken.has(id)) handedOff++;
      for (const [key, run] of runs) {
        const queue = keys.get(key) ?? [];
        const rest = run.filter((id) => !taken.has(id));
        // The lease took a prefix of the run (claimIds). If it left any, the key is held in the
        // table (its head backing off, dead, leased by another, not due or not visible yet),
        // and the table's path owns the key's later messages.
        if (rest.length === 0) {
          if (queue.length === 0) keys.delete(key);
        } else {
          handedOff += rest.length + queue.length;
          keys.delete(key);
        }
      }
      if (leased.records.length > 0) {
        const leaseEnd = started + this.parts.leaseMs;
        const { token, records, fence } = leased;
        const batch = { token, records, blockedKeys: [], inFlightKeys: 0, fence };
        await this.parts.deliver({ ...batch, claimedAt: started, leaseEnd }, started);
        // A key delivered in this batch gets its next run in the next round; one that failed
        // is refused there by claimIds (its head is pending again), and so left to the table.
      }
    }
    if (handedOff > 0) {
      this.parts.log.debug(`Log tailing left ${handedOff} message(s) to the table's path`);
      this.parts.handOff();
    }
    // Every insert up to here is settled in the table, or pending there for its own path.
    try {
      await this.parts.source.acknowledge(batch.position);
    } catch (error) {
      // Not acknowledged: read again after a reconnect, which the lease by id makes harmless.
      this.parts.log.warn(
        `Acknowledging log position ${batch.position} failed: ${describeError(error)}`,
      );
    }
  }

  /** Leases `ids` (see claimIds); undefined when the database failed. */
  private async lease(
    ids: readonly string[],
  ): Promise<(ClaimedIds & { fence?: AbortSignal }) | undefined> {
    if (ids.length === 0) return { token: '', records: [], unseen: [] };
    const { token, fence } = this.parts.lease?.() ?? { token: randomUUID() };
    const { store, owner, leaseMs } = this.parts;
    let call: Promise<ClaimedIds> | undefined;
    try {
      const leased = await this.parts.watchdog.run(
        'claim',
        () => (call = store.claimIds({ ids, owner, leaseMs, token })),
      );
      return { ...leased, fence };
    } catch (error) {
      // It may have committed all the same, its answer lost with the connection: its rows are
      // given back by token, their attempt with them, before the table's next claim.
      this.parts.lostLease(token, call);
      this.parts.pause(error, 'lease by id failed (database unavailable?)');
      return undefined;
    }
  }
}
