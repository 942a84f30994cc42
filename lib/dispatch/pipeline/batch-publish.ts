import { setMaxListeners } from 'node:events';
import { PublishTimeoutError } from '../../errors/publish-timeout.error';
import type { OutboxPublisher, PublishOutcome } from '../../publishers/outbox-publisher.interface';
import { pastPublishDeadline, setPublishDeadline } from '../../publishers/publish-deadline';
import type { ClaimedRecord } from '../../store/ports/outbox-store.port';
import { laneOf } from '../../store/rows/redrive-lane';
import { readPublish, type PublishReading, type PublishResult } from './batch-outcome';
import type { DispatcherLog } from '../dispatcher-log';
import { keyRounds, recordRound } from './key-runs';
import type { OutagePause } from '../health/outage-pause';
import { pausedPast } from '../health/process-pause';
import { within } from '../sleep';
import type { BatchHold } from './batch-hold';

/**
 * How long a publish aborted by the dispatcher's deadline or by shutdown may take to answer the
 * abort, within what the lease leaves for publishing: a publisher that honours the signal
 * answers at once, saying which messages the broker confirmed and which it never wrote.
 */
const ABORT_ANSWER_GRACE_MS = 250;

/** What the publish of one batch goes by, besides its records. */
export interface BatchPublishing {
  /**
   * What holds the batch: its fence (aborted once the hold is lost), the latest a late answer
   * may still be read (`publishBy`, moving while the hold is `renewed`), and whether it still
   * holds, read on the clock before every send (a fence's abort comes from a timer, which
   * cannot fire while the event loop is held up).
   */
  readonly hold: PublishingHold;
  /** The batch's name in log lines. */
  readonly batchId: string;
  /**
   * Called once when a call does not answer the shutdown's abort within the grace: the batch
   * must keep its messages from other dispatchers while the call runs (ShutdownHold). The
   * publish then waits for the call, however long it runs, and reads what it answers.
   */
  readonly onUnanswered?: () => Promise<void>;
  /** Told of each publish call as it starts, with a promise that settles when it returns. */
  readonly onCall?: (returned: Promise<void>) => void;
}

/** A publish's deadlines, on the monotonic clock but for `timeoutMs`. */
interface PublishDeadlines extends BatchPublishing {
  /** How long the publish may take (the publish timeout, cut short by the lease). */
  readonly timeoutMs: number;
  /** When the publish deadline passes. */
  readonly deadlineAt: number;
}

/** What the publish reads of the batch's hold. */
export type PublishingHold = Pick<BatchHold, 'fence' | 'publishBy' | 'renewed' | 'holds'>;

/** Pauses claims for an outage the publish met (see `OutboxDispatcher.pause`). */
export type OnOutage = (error: unknown, what: string, counted: string, probe: boolean) => void;

/**
 * The publish of one claimed batch: its rounds, its deadline, its answer to an abort, and what
 * the broker's answer means for the outage pause.
 */
export class BatchPublish {
  constructor(
    private readonly publisher: OutboxPublisher,
    private readonly publishTimeoutMs: number,
    /** Aborted at shutdown: publishes in flight answer `shutdown`. */
    private readonly shutdown: AbortSignal,
    private readonly outage: OutagePause,
    private readonly onOutage: OnOutage,
    private readonly log: DispatcherLog,
  ) {}

  /**
   * Publishes under one deadline and says what the broker side came to. A batch holding runs
   * (several messages of a key) goes out in rounds (see keyRounds): a key's next message waits
   * for the broker's answer to the one before, and a key whose message failed sends no more.
   * `held` records (behind an exhausted one of their key) are not sent.
   */
  async publish(
    records: readonly ClaimedRecord[],
    held: ReadonlySet<string>,
    publishing: BatchPublishing,
  ): Promise<PublishResult> {
    const { hold } = publishing;
    const { fence } = hold;
    // Held by an owner lock or partitions already lost: another dispatcher may hold them by now.
    if (fence?.aborted === true || !hold.holds()) return { kind: 'lapsed' };
    // Shutdown gave up waiting before this batch began (it waited for its publish hold).
    if (this.shutdown.aborted) return { kind: 'shutdown' };
    // The publish timeout, cut short by the hold: in-flight publishes are aborted when the
    // hold's deadline passes, whichever comes first. A renewed hold is kept by its fence instead
    // (aborted when it is lost), so it does not cut the timeout.
    const timeoutMs = Math.max(
      0,
      hold.renewed
        ? this.publishTimeoutMs
        : Math.min(this.publishTimeoutMs, Math.floor(hold.publishBy - performance.now())),
    );
    // One controller per batch, aborted by its own deadline or by shutdown. (Not AbortSignal.any:
    // a listener per batch on the long-lived shutdown signal must be removed, not accumulated.)
    const controller = new AbortController();
    const { signal } = controller;
    // Read on the clock before every send (pastPublishDeadline): the timer below cannot fire
    // while the process is paused, and what runs first on waking must not send.
    const deadlineAt = performance.now() + timeoutMs;
    // The hold's validity is read beside the deadline (a lost one aborts the fence).
    setPublishDeadline(controller, deadlineAt, () => new PublishTimeoutError(timeoutMs), hold);
    // Publishers may watch the signal once per message; that is no listener leak.
    setMaxListeners(records.length + 10, signal);
    const onShutdown = (): void => controller.abort(this.shutdown.reason);
    this.shutdown.addEventListener('abort', onShutdown, { once: true });
    const onFence = (): void => controller.abort(fence?.reason);
    fence?.addEventListener('abort', onFence, { once: true });
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), timeoutMs);
      // Cleared at once: a call deaf to shutdown's abort may outlive the app, and this timer
      // must not keep its process alive.
      signal.addEventListener(
        'abort',
        () => {
          clearTimeout(timer);
          resolve('timeout');
        },
        { once: true },
      );
    });
    const send = (batch: readonly ClaimedRecord[]): Promise<PublishResult> =>
      this.publishRound(batch, controller, deadline, { ...publishing, timeoutMs, deadlineAt });
    try {
      const rounds = keyRounds(records);
      if (rounds.length === 1 && held.size === 0) return await send(records);
      const outcomes: (PublishOutcome | undefined)[] = records.map(() => undefined);
      const stopped = new Set<string>();
      for (const [place, round] of rounds.entries()) {
        const sendable = round.filter((i) => {
          const record = records[i];
          return record !== undefined && !held.has(record.id) && !stopped.has(laneOf(record) ?? '');
        });
        if (sendable.length === 0) break;
        const result = await send(sendable.flatMap((i) => records[i] ?? []));
        // Nothing was acknowledged before the first round: after an outage the batch fares as
        // one publish (all of it goes back). Not after a timeout: that counts an attempt for
        // what the round sent only, since the rest of each run and the held records never
        // reached the broker (charged with the head's timeout, a run went dead with it).
        if (place === 0 && result.kind !== 'outcomes' && result.kind !== 'timeout') return result;
        if (result.kind === 'timeout') {
          for (const i of sendable) outcomes[i] = { ok: false, error: result.error };
        }
        // After an outage or a timeout, what the earlier rounds delivered stays delivered, and
        // every later message goes back unpublished (no outcome).
        if (result.kind !== 'outcomes') break;
        for (const key of recordRound(records, sendable, result.outcomes, outcomes)) {
          stopped.add(key);
        }
        // The deadline passed or shutdown aborted (the publisher answered the abort, or the
        // process was paused through it): nothing more goes out.
        if (pastPublishDeadline(signal)) break;
        // A round that paused claims (every message timed out) ends the batch too.
        if (this.outage.paused) break;
      }
      return { kind: 'outcomes', outcomes };
    } finally {
      clearTimeout(timer);
      this.shutdown.removeEventListener('abort', onShutdown);
      fence?.removeEventListener('abort', onFence);
    }
  }

  /**
   * One publish call, raced against the batch's deadline. Past the deadline, or at shutdown, the
   * call is aborted and its answer to the abort read (answerToAbort). A call that does not
   * answer the shutdown's abort within that grace is waited for until it returns (see
   * `onUnanswered`): it may still write its messages, so they are not handed back while it runs.
   */
  private async publishRound(
    records: readonly ClaimedRecord[],
    controller: AbortController,
    deadline: Promise<'timeout'>,
    limits: PublishDeadlines,
  ): Promise<PublishResult> {
    const { timeoutMs, deadlineAt, batchId } = limits;
    const { fence } = limits.hold;
    const call = startCall(() => this.publisher.publish(records, controller.signal));
    limits.onCall?.(call.ended);
    try {
      const answer = await Promise.race([call.answer, deadline]);
      if (answer !== 'timeout') {
        return this.react(readPublish({ kind: 'returned', outcomes: answer }, records.length));
      }
      if (this.shutdown.aborted) return await this.afterShutdown(call, controller, records, limits);
      // The owner lock, the renewed lease or the partitions were lost: nothing more is sent,
      // and what the publisher answers the abort says what the broker confirmed meanwhile.
      if (fence?.aborted === true)
        return await this.afterFence(call, controller, records.length, limits);
      const paused = pausedPast(deadlineAt);
      const error = new PublishTimeoutError(timeoutMs);
      controller.abort(error);
      const late = await this.answerToAbort(call, limits);
      const reading = readPublish(
        { kind: 'timed-out', error, ...(late === undefined ? {} : { late: late.value }) },
        records.length,
      );
      return paused > 0 ? this.afterPause(reading.result, paused, batchId) : this.react(reading);
    } catch (error) {
      if (this.shutdown.aborted) return await this.afterShutdown(call, controller, records, limits);
      if (fence?.aborted === true) return { kind: 'lapsed' };
      return this.react(readPublish({ kind: 'threw', error }, records.length));
    }
  }

  /**
   * A round whose fence was lost: the call is aborted and its answer read within the grace.
   * What the broker confirmed is recorded as delivered (the settle is fenced: it lands only if
   * no one took the messages over meanwhile, so a lapse that nobody acted on costs no copy of
   * them); everything else goes back unpublished as after a lapsed lease, since the next holder
   * may be publishing it already (at least once, as after a crash). Without an answer, all of it.
   */
  private async afterFence(
    call: TrackedCall,
    controller: AbortController,
    sent: number,
    limits: PublishDeadlines,
  ): Promise<PublishResult> {
    controller.abort(limits.hold.fence?.reason);
    const late = await this.answerToAbort(call, limits);
    return lapsedResult(late?.value, sent);
  }

  /**
   * The call's answer to an abort, if it comes within ABORT_ANSWER_GRACE_MS and before
   * `publishBy` (the lease must leave time to settle), or at once when already past it. A
   * rejection (an abort's) says nothing about the messages: as no answer.
   */
  private answerToAbort(
    call: TrackedCall,
    { hold }: PublishDeadlines,
  ): Promise<{ value: readonly PublishOutcome[] } | undefined> {
    // At least a moment, even past publishBy: a publisher that found the deadline passed on
    // waking from a pause answers at once, saying which messages it never sent.
    const graceMs = Math.max(
      1,
      Math.min(ABORT_ANSWER_GRACE_MS, Math.floor(hold.publishBy - performance.now())),
    );
    return within(call.answer, graceMs);
  }

  /**
   * A round that shutdown aborted: what its call answers is recorded (stoppedResult). A call
   * still running after the grace is handed to `onUnanswered` and then waited for.
   */
  private async afterShutdown(
    call: TrackedCall,
    controller: AbortController,
    records: readonly ClaimedRecord[],
    limits: PublishDeadlines,
  ): Promise<PublishResult> {
    // What a message without an answer of its own counts its attempt with (stoppedResult).
    const error: unknown = controller.signal.reason;
    let late = await this.answerToAbort(call, limits);
    if (late === undefined && !call.returned) {
      await limits.onUnanswered?.();
      late = await call.answer.then(
        (value) => ({ value }),
        () => undefined,
      );
    }
    return this.react(
      readPublish(
        { kind: 'stopped', error, ...(late === undefined ? {} : { late: late.value }) },
        records.length,
      ),
    );
  }

  /**
   * Applies what a publish means for claiming, before the batch is judged (as the pause's
   * observer hook has always run before `retryIf`).
   */
  private react({ result, reaction }: PublishReading): PublishResult {
    if (reaction.kind === 'pause') {
      this.onOutage(reaction.error, reaction.what, reaction.counted, reaction.probe);
    } else if (reaction.kind === 'resume') this.outage.publishWentThrough();
    return result;
  }

  /**
   * A publish whose deadline passed while this process was paused says nothing about the
   * broker: no outage is begun or ended, and what was never sent goes back as after a lapsed
   * lease (another dispatcher may hold it by now). What may have been sent keeps its outcome.
   */
  private afterPause(result: PublishResult, pausedMs: number, batch: string): PublishResult {
    this.log.warn(
      `This process was paused for at least ${pausedMs} ms (its event loop did not run: a long GC, SIGSTOP, a debugger, or blocking code) while batch ${batch} was publishing; its publish deadline passed meanwhile, so what it had not sent goes back unpublished. Not a broker failure: claims go on (${this.log.label})`,
    );
    return result.kind === 'outage' ? { kind: 'lapsed' } : result;
  }
}

/**
 * What a publish cut short by a lost fence says: each message the broker confirmed, as confirmed;
 * every other one unsent (given back, its attempt with it). Without an answer of one outcome per
 * message, the whole round as lapsed.
 */
function lapsedResult(late: readonly PublishOutcome[] | undefined, sent: number): PublishResult {
  if (late?.length !== sent) return { kind: 'lapsed' };
  return { kind: 'outcomes', outcomes: late.map((o) => (o.ok ? o : undefined)) };
}

/** A publish call, and whether it has returned (resolved or rejected) yet. */
interface TrackedCall {
  readonly answer: Promise<readonly PublishOutcome[]>;
  readonly returned: boolean;
  /** Settles (never rejects) when the call has returned. */
  readonly ended: Promise<void>;
}

/** Calls `publish`; a publisher that throws rather than rejects is read as one that rejects. */
function startCall(publish: () => Promise<readonly PublishOutcome[]>): TrackedCall {
  // Called at once all the same: an async function runs up to its first await.
  const answer = (async () => publish())();
  let returned = false;
  const end = (): void => {
    returned = true;
  };
  // Observed here only: the round awaits `answer` itself.
  const ended = answer.then(end, end);
  return {
    answer,
    ended,
    get returned() {
      return returned;
    },
  };
}
