import { OutboxDatabaseTimeoutError } from '../../errors/outbox-database-timeout.error';
import { describeError } from '../../internal/describe-error';
import type { Settlement } from '../../store/ports/outbox-store.port';
import type { SettleResult } from './batch-outcome';
import type { DatabaseWatchdog } from '../health/database-watchdog';
import { batchIdOf, type DispatcherLog } from '../dispatcher-log';
import { sleep, within } from '../sleep';

/** Settle retries back off from this, doubling, up to `SETTLE_MAX_BACKOFF_MS`. */
const SETTLE_FIRST_BACKOFF_MS = 100;
const SETTLE_MAX_BACKOFF_MS = 1_000;

/** Records a batch's outcome, trying again until its lease ends. */
export class SettleRetry {
  constructor(
    private readonly watchdog: DatabaseWatchdog,
    /** The longest one database call may take before the watchdog gives up on it. */
    private readonly dbCallMs: number,
    /** Aborted at shutdown: no more tries. */
    private readonly shutdown: AbortSignal,
    private readonly log: DispatcherLog,
  ) {}

  /**
   * Settles, retrying until the lease ends: the broker has these messages, and an outcome not
   * recorded means publishing them again. Settles run even while an earlier database call is
   * stalled (another batch's outcome must not wait behind it). A call the watchdog gives up on
   * (e.g. waiting behind the application's pool) is not repeated but still awaited, until one
   * database call past the lease end: it is first in line and may yet land, and its answer says
   * exactly how many rows were still this dispatcher's.
   */
  async settle(
    /** The batch's token, for the log lines. */
    token: string,
    settlement: Settlement,
    leaseEnd: number,
    /** One try, fenced by what holds the batch (its BatchHold): how many rows it changed. */
    record: (settlement: Settlement) => Promise<number>,
  ): Promise<SettleResult> {
    for (let attempt = 1, backoff = SETTLE_FIRST_BACKOFF_MS; ; attempt++) {
      const call = record(settlement);
      try {
        let changed: number;
        try {
          changed = await this.watchdog.run('settle', () => call, { evenWhileStalled: true });
        } catch (error) {
          if (!(error instanceof OutboxDatabaseTimeoutError)) throw error;
          const late = await within(call, leaseEnd + this.dbCallMs - performance.now());
          if (late === undefined) throw error;
          changed = late.value;
        }
        if (attempt > 1) {
          this.log.log(`A batch's outcome was recorded on try ${attempt}`, {
            batch: batchIdOf(token),
          });
        }
        // After a failed try, fewer changed rows may mean that try committed after all.
        return { kind: 'settled', changed, sole: attempt === 1 };
      } catch (error) {
        // At shutdown, or when the next try could not land within the lease, give up.
        if (this.shutdown.aborted || performance.now() + backoff >= leaseEnd) {
          this.log.error(
            `Recording a batch's outcome failed ${attempt} time(s) until its lease ended; unless a late try landed, its messages will be claimed and published again: ${describeError(error)}`,
            { batch: batchIdOf(token) },
          );
          return { kind: 'unsettled' };
        }
        await sleep(backoff);
        backoff = Math.min(SETTLE_MAX_BACKOFF_MS, backoff * 2);
      }
    }
  }
}
