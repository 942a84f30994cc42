/**
 * A Nest logger for a dispatcher in `'partitions'` mode (T3) that prints errors and warnings as
 * the bench's apps do and counts what ownership says in its log
 * (lib/dispatch/partitions/partition-ownership.ts): each lapse (the WARN "… dropping the N held
 * and stopping their publishes until a heartbeat lands", with its reason), and each takeover of
 * partitions from a process whose heartbeat ran out (the "took N (M from …, whose heartbeat ran
 * out)" line, counting M).
 */
import type { LoggerService } from '@nestjs/common';
import type { OutboxPublisher, OutboxRecord, PublishOutcome } from '../../lib';

const LAPSE = /^Delivery partitions: (.*); dropping the (\d+) held/;
const TAKEN = /(\d+) from \S+, whose heartbeat ran out/g;

export interface PartitionLineCounts {
  /** Lapses of this process's holding, and their reasons as logged. */
  readonly lapses: number;
  readonly lapseReasons: string[];
  /** Partitions held when those lapses dropped them, summed. */
  readonly lapsedPartitions: number;
  /** Partitions this process took from a process whose heartbeat had run out. */
  readonly takenOver: number;
  /** Failed heartbeats (once per streak, as logged). */
  readonly beatFailures: number;
}

export class PartitionLines implements LoggerService {
  private counts = PartitionLines.empty();

  private static empty(): PartitionLineCounts {
    return { lapses: 0, lapseReasons: [], lapsedPartitions: 0, takenOver: 0, beatFailures: 0 };
  }

  /** What was counted since the last call, and starts again. */
  take(): PartitionLineCounts {
    const counts = this.counts;
    this.counts = PartitionLines.empty();
    return counts;
  }

  private see(message: unknown): void {
    const text = String(message);
    const lapse = LAPSE.exec(text);
    const c = this.counts;
    if (lapse !== null) {
      this.counts = {
        ...c,
        lapses: c.lapses + 1,
        lapseReasons: [...c.lapseReasons, lapse[1] ?? ''],
        lapsedPartitions: c.lapsedPartitions + Number(lapse[2]),
      };
      return;
    }
    if (text.startsWith('Delivery partitions: a heartbeat failed'))
      this.counts = { ...c, beatFailures: c.beatFailures + 1 };
    if (text.startsWith('Delivery partitions: took ')) {
      let taken = 0;
      for (const m of text.matchAll(TAKEN)) taken += Number(m[1]);
      this.counts = { ...c, takenOver: c.takenOver + taken };
    }
  }

  log(message: unknown): void {
    this.see(message);
  }
  warn(message: unknown, ...rest: unknown[]): void {
    this.see(message);
    // Said at every app start of the child (it closes its app on "exit", not on SIGTERM).
    if (String(message).startsWith('Nothing handles SIGTERM')) return;
    console.warn(message, ...rest);
  }
  error(message: unknown, ...rest: unknown[]): void {
    this.see(message);
    console.error(message, ...rest);
  }
  debug(): void {}
  verbose(): void {}
}

/**
 * Wraps a publisher and counts, per message id, the publishes the broker confirmed (an `ok`
 * outcome), so that a copy at the consumer can be told apart: sent again after a confirmed
 * publish, or after one that was not confirmed (T3).
 */
export class ConfirmCounting implements OutboxPublisher {
  readonly confirmed = new Map<string, number>();

  constructor(private readonly inner: OutboxPublisher) {}

  async publish(
    messages: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    const outcomes = await this.inner.publish(messages, signal);
    outcomes.forEach((o, i) => {
      const id = messages[i]?.messageId;
      if (o.ok && id !== undefined) this.confirmed.set(id, (this.confirmed.get(id) ?? 0) + 1);
    });
    return outcomes;
  }

  close(): Promise<void> {
    return this.inner.close?.() ?? Promise.resolve();
  }

  /** The ids confirmed since the last call (one entry per confirmation), and starts again. */
  take(): string[] {
    const ids = [...this.confirmed].flatMap(([id, n]) => Array<string>(n).fill(id));
    this.confirmed.clear();
    return ids;
  }
}
