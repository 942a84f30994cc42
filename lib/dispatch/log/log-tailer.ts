import { describeError } from '../../internal/describe-error';
import type { ClaimedIds, OutboxDeliveryPort } from '../../store/ports/outbox-store.port';
import type { LoggedBatch, OutboxLogSource } from '../../store/ports/outbox-log-source.port';
import type { DispatcherLog } from '../dispatcher-log';
import { isStatementTimeout } from '../health/statement-timeout';
import type { DeliveryPipeline } from '../pipeline/delivery-pipeline';
import type { RowLeases } from '../leases/row-leases';

/**
 * When the table is swept again for ids it did not show (it is also swept at once): a commit
 * the log handed over a moment before a new snapshot sees it is visible by then.
 */
const UNSEEN_SWEEP_MS = 100;
/**
 * The fewest ids a lease by id is cut down to when the server cancels leases for its statement
 * timeout: one that small still cancelled is not load any more, and is taken for an outage.
 */
const MIN_LEASE_IDS = 8;

/** What the tailer uses of the pipeline. */
export type TailerPipeline = Pick<
  DeliveryPipeline,
  'open' | 'lifecycle' | 'deliver' | 'pause' | 'watchdog' | 'dbCallMs'
>;

/** What the tailer uses of the row leases: the token, the hold, the leases whose answer was lost. */
export type TailerLeases = Pick<RowLeases, 'take' | 'holdOf'>;

/** What the tailer needs besides the pipeline. */
export interface LogTailerParts {
  readonly source: OutboxLogSource;
  readonly store: Required<Pick<OutboxDeliveryPort, 'claimIds'>>;
  readonly pipeline: TailerPipeline;
  readonly leases: TailerLeases;
  readonly log: DispatcherLog;
  readonly owner: string;
  readonly leaseMs: number;
  readonly batchSize: number;
  /** Most batches leased and not yet settled at once. */
  readonly batchesInFlight: number;
  /**
   * How long the ids at hand wait for more before a batch smaller than `batchSize` is leased,
   * while another batch is in flight (with none in flight they go at once).
   */
  readonly lingerMs: number;
  /** Ordering on: a key's messages go one run (of up to `maxRun`) at a time, in log order. */
  readonly ordered: boolean;
  readonly maxRun: number;
  /** Some rows were left to the table: the table's path (the sweep) should look soon. */
  readonly handOff: () => void;
  /** The table's path should look in `delayMs` (rows left to it become due, or visible, then). */
  readonly sweepAfter: (delayMs: number) => void;
}

/** One handover of the log: its position, acknowledged once none of its inserts is pending. */
interface Handover {
  readonly position: string;
  remaining: number;
}

/** One insert the log named, waiting to be leased. */
interface Entry {
  readonly id: string;
  /** Null without ordering or without a key: no order to keep. */
  readonly key: string | null;
  readonly handover: Handover;
  readonly at: number;
}

/**
 * The log source's side of delivery: takes the committed inserts the log hands over (in commit
 * order), leases them by id (`claimIds`) and hands them to the pipeline, with up to
 * `batchesInFlight` batches leased at once. Per-key order holds across them: a key with a batch
 * in flight gets its next run only once that batch settled. Positions are acknowledged in log
 * order, each once every insert up to it is settled in the table or pending there for the
 * table's path. Small handovers coalesce: while a batch is in flight, the ids at hand wait up to
 * `lingerMs` for a fuller batch, and meanwhile every handover that arrives joins them.
 *
 * What it cannot lease (a key held in the table by a message backing off or dead, rows leased by
 * another process, not due yet) it leaves to the table, whose sweep runs on beside it: see
 * ARCHITECTURE.md, "Log tailing: two paths, one owner".
 */
export class LogTailer {
  private readonly abort = new AbortController();
  private running: Promise<void> | undefined;
  private reading = false;
  private readonly handovers: Handover[] = [];
  private pending: Entry[] = [];
  private readonly batches = new Set<Promise<void>>();
  private readonly keysInFlight = new Set<string>();
  /** Batches whose lease is on its way (the rest of `batches` are publishing or settling). */
  private leasing = 0;
  private lingerTimer: NodeJS.Timeout | undefined;
  private progressed: (() => void) | undefined;
  private acknowledging: Promise<void> = Promise.resolve();
  private handedOff = 0;
  /**
   * The most ids one lease by id takes: halved each time the server cancels a lease for its
   * statement timeout (a busy server, not a gone one), doubled back as leases answer in time.
   */
  private leaseCap: number;

  constructor(private readonly parts: LogTailerParts) {
    this.leaseCap = parts.batchSize;
  }

  /** Whether the reader has stopped and every batch it leased has settled. */
  get idle(): boolean {
    return !this.reading && this.batches.size === 0;
  }

  start(): void {
    if (this.running !== undefined) return;
    this.reading = true;
    this.running = this.parts.source
      .run((batch) => this.handle(batch), this.abort.signal)
      .catch((error: unknown) =>
        this.parts.log.error(`Log tailing stopped on an error: ${describeError(error)}`),
      )
      .finally(() => {
        this.reading = false;
      });
  }

  /**
   * Stops: lets the batches in flight settle and their positions be acknowledged while the
   * reader still streams (PostgreSQL takes acknowledgements on the stream), then stops reading.
   * The wait ends early once shutdown aborts the publishes still running. What was handed over
   * and not leased stays unacknowledged: read again after a restart.
   */
  async stop(): Promise<void> {
    clearTimeout(this.lingerTimer);
    this.lingerTimer = undefined;
    await this.settled(this.parts.pipeline.lifecycle.signal);
    this.abort.abort();
    this.progressed?.();
    await this.running;
    await this.settled();
  }

  /** Resolves once no batch is in flight and the acknowledgements went out, or `signal` aborts. */
  private async settled(signal?: AbortSignal): Promise<void> {
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<void>((resolve) => (onAbort = resolve));
    const listener = (): void => onAbort?.();
    signal?.addEventListener('abort', listener, { once: true });
    try {
      while (this.batches.size > 0 && signal?.aborted !== true) {
        await Promise.race([...this.batches, aborted]);
      }
    } finally {
      signal?.removeEventListener('abort', listener);
    }
    await this.acknowledging;
  }

  /**
   * One run of committed inserts, queued for leasing; resolves once there is room for more, so
   * that the reader holds back while the batches at hand are that far behind.
   */
  private async handle(batch: LoggedBatch): Promise<void> {
    const handover: Handover = { position: batch.position, remaining: batch.inserts.length };
    this.handovers.push(handover);
    // Transactions past the source's bound are the table's whole. A later transaction's message
    // of one of their keys is not leased here before their rows go out: claimIds leases a row
    // only when every earlier blocking row of its key is in the same lease.
    if ((batch.leftToTable ?? 0) > 0) this.handedOff += batch.leftToTable ?? 0;
    const at = performance.now();
    const ordered = this.parts.ordered;
    for (const insert of batch.inserts) {
      this.pending.push({ id: insert.id, key: ordered ? insert.key : null, handover, at });
    }
    this.pump();
    this.acknowledgeDone();
    const room = this.parts.batchSize * this.parts.batchesInFlight;
    while (this.pending.length >= room && !this.abort.signal.aborted) {
      await new Promise<void>((resolve) => (this.progressed = resolve));
    }
  }

  /** Leases and starts batches while there is room and work that may go now. */
  private pump(): void {
    const { pipeline, batchSize, batchesInFlight, lingerMs } = this.parts;
    // As the claim loop does: up to batchesInFlight batches publishing, and the next lease on its
    // way beside them, one at a time.
    while (
      this.leasing === 0 &&
      this.batches.size - this.leasing < batchesInFlight &&
      this.pending.length > 0
    ) {
      // Stopping: what is not leased stays unacknowledged, read again after a restart.
      if (pipeline.lifecycle.stopping) break;
      if (!pipeline.open) {
        // An outage: the table's path takes them after the pause, with no attempt spent here.
        for (const entry of this.pending) entry.handover.remaining--;
        this.handedOff += this.pending.length;
        this.pending = [];
        break;
      }
      if (this.batches.size > 0 && this.pending.length < batchSize && lingerMs > 0) {
        const waitMs = (this.pending[0]?.at ?? 0) + lingerMs - performance.now();
        if (waitMs > 0) {
          this.lingerTimer ??= setTimeout(() => {
            this.lingerTimer = undefined;
            this.pump();
          }, waitMs);
          return;
        }
      }
      const picked = this.pick();
      if (picked.length === 0) break;
      clearTimeout(this.lingerTimer);
      this.lingerTimer = undefined;
      const batch = this.run(picked).finally(() => {
        this.batches.delete(batch);
        this.pump();
        this.acknowledgeDone();
        this.progressed?.();
      });
      this.batches.add(batch);
    }
    this.reportHandOff();
  }

  /**
   * Up to `batchSize` entries in log order: keyless ones, and of each key not in flight a run of
   * up to `maxRun` from its front. A key in flight, or whose run is full, keeps its entries
   * (all of them, so none overtakes an earlier one) for a later batch.
   */
  private pick(): Entry[] {
    const { maxRun } = this.parts;
    const batchSize = Math.min(this.parts.batchSize, this.leaseCap);
    const picked: Entry[] = [];
    const rest: Entry[] = [];
    const runs = new Map<string, number>();
    const closed = new Set<string>();
    for (const entry of this.pending) {
      const key = entry.key;
      if (picked.length >= batchSize) rest.push(entry);
      else if (key === null) picked.push(entry);
      else if (closed.has(key) || this.keysInFlight.has(key)) rest.push(entry);
      else {
        const run = (runs.get(key) ?? 0) + 1;
        runs.set(key, run);
        picked.push(entry);
        if (run >= maxRun) closed.add(key);
      }
    }
    this.pending = rest;
    for (const key of runs.keys()) this.keysInFlight.add(key);
    return picked;
  }

  /** Leases `picked` by id and delivers what it took; what it did not take goes to the table. */
  private async run(picked: readonly Entry[]): Promise<void> {
    const keys = new Set<string>();
    for (const entry of picked) if (entry.key !== null) keys.add(entry.key);
    let requeued = false;
    try {
      const started = performance.now();
      this.leasing++;
      let leased: Awaited<ReturnType<LogTailer['lease']>>;
      try {
        leased = await this.lease(picked.map((entry) => entry.id));
      } finally {
        this.leasing--;
      }
      if (leased === 'smaller') {
        // Back in front, each key's entries ahead of its later ones, for smaller leases.
        requeued = true;
        for (const key of keys) this.keysInFlight.delete(key);
        this.pending = [...picked, ...this.pending];
        return;
      }
      // The next lease may go out while this batch publishes.
      this.pump();
      if (leased === undefined) {
        // The database failed (the pipeline paused); the rows stay in the table, pending.
        this.handedOff += picked.length;
        return;
      }
      // Ids the table does not show are not waited for here: most never will be (inserted and
      // deleted in one transaction, XA, a replay after delete-at-settle), and the log's later
      // work would wait behind them. A commit not visible yet is pending in the table once it
      // is, and the table's path takes it: swept at once and again shortly.
      if (leased.unseen.length > 0) this.parts.sweepAfter(UNSEEN_SWEEP_MS);
      // Delayed messages and retries are refused until due: the table's path looks when the
      // first is due rather than at its next poll.
      if (leased.notDueForMs !== undefined) this.parts.sweepAfter(leased.notDueForMs);
      const taken = new Set(leased.records.map((r) => r.id));
      const unseen = new Set(leased.unseen);
      const held = new Set<string>();
      const left = picked.filter((entry) => !taken.has(entry.id));
      // The lease took a prefix of each key's run (claimIds). A key it refused a row of is held
      // in the table (its head backing off, dead, leased by another, not due), and the table's
      // path owns that key's messages at hand too. An id the table does not show holds nothing.
      for (const entry of left) {
        if (entry.key !== null && !unseen.has(entry.id)) held.add(entry.key);
      }
      this.handedOff += left.length;
      if (held.size > 0) this.leaveKeysToTable(held);
      if (leased.records.length > 0) {
        const { token, records, fence } = leased;
        const leaseEnd = started + this.parts.leaseMs;
        const hold = this.parts.leases.holdOf({
          token,
          records,
          leaseEnd,
          ...(fence && { fence }),
        });
        await this.parts.pipeline.deliver(
          { token, records, claimedAt: started, hold },
          'log reader',
          started,
        );
        // A key that failed here is refused by claimIds next time (its head is pending again),
        // and so left to the table.
      }
    } finally {
      if (!requeued) {
        for (const key of keys) this.keysInFlight.delete(key);
        for (const entry of picked) entry.handover.remaining--;
      }
    }
  }

  /** The queued entries of keys the table holds: theirs to take, in key order. */
  private leaveKeysToTable(keys: ReadonlySet<string>): void {
    const rest: Entry[] = [];
    for (const entry of this.pending) {
      if (entry.key !== null && keys.has(entry.key)) {
        this.handedOff++;
        entry.handover.remaining--;
      } else rest.push(entry);
    }
    this.pending = rest;
  }

  private reportHandOff(): void {
    if (this.handedOff === 0) return;
    this.parts.log.debug(`Log tailing left ${this.handedOff} message(s) to the table's path`);
    this.handedOff = 0;
    this.parts.handOff();
  }

  /**
   * Acknowledges the newest position whose inserts, and every earlier one's, are settled in the
   * table or pending there for its own path. Acknowledgements go out one at a time, in order.
   */
  private acknowledgeDone(): void {
    let position: string | undefined;
    while (this.handovers.length > 0 && (this.handovers[0]?.remaining ?? 1) <= 0) {
      position = this.handovers.shift()?.position;
    }
    this.reportHandOff();
    if (position === undefined) return;
    const done = position;
    this.acknowledging = this.acknowledging.then(async () => {
      try {
        await this.parts.source.acknowledge(done);
      } catch (error) {
        // Not acknowledged: read again after a reconnect, which the lease by id makes harmless.
        this.parts.log.warn(`Acknowledging log position ${done} failed: ${describeError(error)}`);
      }
    });
  }

  /**
   * Leases `ids` (see claimIds); undefined when the database failed, `'smaller'` when the server
   * cancelled the lease for its statement timeout and the ids should go again in smaller leases.
   */
  private async lease(
    ids: readonly string[],
  ): Promise<(ClaimedIds & { fence?: AbortSignal }) | 'smaller' | undefined> {
    const { store, owner, leaseMs, pipeline, leases, log, batchSize } = this.parts;
    const sentAt = performance.now();
    try {
      const { taken: leased, fence } = await leases.take((token) =>
        store.claimIds({ ids, owner, leaseMs, token }),
      );
      // Grown back only by leases well within the timeout: one that barely passed says the
      // server is still as busy, and twice the ids would be cancelled again.
      if (this.leaseCap < batchSize && performance.now() - sentAt < pipeline.dbCallMs / 4) {
        this.leaseCap = Math.min(batchSize, this.leaseCap * 2);
        if (this.leaseCap === batchSize) {
          log.log(
            `Leases by id answer within the statement timeout again: back to ${batchSize} ids per lease`,
          );
        }
      }
      return { ...leased, ...(fence && { fence }) };
    } catch (error) {
      // It may have committed all the same, its answer lost with the connection: `take` has its
      // rows given back by token, their attempt with them, before the table's next claim.
      // The server answered, cancelling a statement that ran too long on it: load, not an
      // outage. The same ids go again in smaller leases; only one this small still cancelled
      // pauses claims as an outage does.
      if (isStatementTimeout(error) && ids.length > MIN_LEASE_IDS) {
        const first = this.leaseCap === batchSize;
        this.leaseCap = Math.max(MIN_LEASE_IDS, Math.floor(ids.length / 2));
        if (first) {
          log.warn(
            `A lease by id of ${ids.length} message(s) ran past the database's statement timeout (${describeError(error)}): the server is busy, not gone, so log tailing goes on delivering, leasing at most ${this.leaseCap} ids at a time until leases answer in time again`,
          );
        }
        return 'smaller';
      }
      pipeline.pause(error, 'lease by id failed (database unavailable?)');
      return undefined;
    }
  }
}
