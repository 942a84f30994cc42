import { OutboxOptionsError } from '../errors/outbox-options.error';
import type { GapRepairAnswer, GapRepairRequest } from '../module/admin/gap-repair.interfaces';
import type { InboxGapRepairOptions } from './inbox.interfaces';
import { InboxMessages } from './inbox.messages';
import type { SequenceGapPolicy, SequencedMessage } from './sequence.interfaces';

interface HeldKey {
  readonly numbers: Map<number, number>;
  ended: number;
}

/** What was here of a key at one moment (see `GapRepairAsker.toAsk`). */
export interface HeldSnapshot {
  readonly numbers: ReadonlySet<number>;
  readonly ended: number;
}

const invalid = (field: string, problem: string, fix: string): OutboxOptionsError =>
  new OutboxOptionsError(
    InboxMessages.optionInvalid(`sequence.repair.${field}`, problem, fix),
    `sequence.repair.${field}`,
  );

function whole(value: number | undefined, fallback: number, field: string, max: number): number {
  const n = value ?? fallback;
  if (!Number.isInteger(n) || n < 1 || n > max) {
    throw invalid(
      field,
      `${String(n)} is not a whole number from 1 to ${max}`,
      `e.g. ${fallback}.`,
    );
  }
  return n;
}

/**
 * The consumer's side of gap repair for one inbox: which numbers a held message may ask for, and
 * the asking. Numbers held by another message of this inbox are not asked for (they are here,
 * waiting their turn), nor are numbers of a key never seen unless `fromFirst`.
 */
export class GapRepairAsker {
  readonly afterMs: number;
  readonly retryMs: number;
  private readonly maxSequences: number;
  private readonly fromFirst: boolean;
  /**
   * Per consumer and key with a delivery here: the numbers held (with how many deliveries hold
   * each), and how many deliveries of the key have ended so far. The entry lives while one of
   * the key's deliveries is here, the asking one included.
   */
  private readonly held = new Map<string, HeldKey>();

  constructor(
    private readonly options: InboxGapRepairOptions,
    onGap: SequenceGapPolicy,
  ) {
    if (
      typeof options !== 'object' ||
      options === null ||
      typeof options.client?.request !== 'function'
    ) {
      throw invalid(
        'client',
        'is not a client',
        'Pass client: httpGapRepairClient({ url }) or an object with request(request).',
      );
    }
    if (!(
      typeof options.topic === 'function' ||
      (typeof options.topic === 'string' && options.topic !== '')
    )) {
      throw invalid(
        'topic',
        'is not a topic',
        "Pass the topic the consumer reads, e.g. 'orders', or (consumer) => topic.",
      );
    }
    if (onGap === 'accept') {
      throw new OutboxOptionsError(
        InboxMessages.optionInvalid(
          'sequence.onGap',
          "'accept' handles a gap at once, so a repair could never fill it",
          "Use onGap: 'hold' (the message waits for its predecessors) or 'reject' with repair.",
        ),
        'sequence.onGap',
      );
    }
    this.afterMs = whole(options.afterMs, 250, 'afterMs', 600_000);
    this.retryMs = whole(options.retryMs, 1_000, 'retryMs', 600_000);
    this.maxSequences = whole(options.maxSequences, 100, 'maxSequences', 10_000);
    this.fromFirst = options.fromFirst === true;
  }

  /** Marks `message` held by a delivery of `consumer`; the function returned unmarks it. */
  markHeld(consumer: string, message: SequencedMessage): () => void {
    const id = JSON.stringify([consumer, message.key]);
    const entry = this.held.get(id) ?? { numbers: new Map<number, number>(), ended: 0 };
    this.held.set(id, entry);
    const { numbers } = entry;
    numbers.set(message.sequence, (numbers.get(message.sequence) ?? 0) + 1);
    return () => {
      entry.ended += 1;
      const left = (numbers.get(message.sequence) ?? 1) - 1;
      if (left > 0) numbers.set(message.sequence, left);
      else numbers.delete(message.sequence);
      if (numbers.size === 0 && this.held.get(id) === entry) this.held.delete(id);
    };
  }

  /** The numbers between `last` and `sequence` not settled (answered gone or dead) yet. */
  open(last: number | undefined, sequence: number, settled: ReadonlySet<number>): number[] {
    const open: number[] = [];
    for (let n = (last ?? 0) + 1; n < sequence; n++) if (!settled.has(n)) open.push(n);
    return open;
  }

  /** What is here of `key` now: take it before reading the key's last number (see `toAsk`). */
  snapshot(consumer: string, key: string): HeldSnapshot {
    const entry = this.held.get(JSON.stringify([consumer, key]));
    return { numbers: new Set(entry?.numbers.keys()), ended: entry?.ended ?? 0 };
  }

  /**
   * Of the open numbers, those to ask for: not held here, the lowest `maxSequences`. Null when a
   * delivery of the key ended since `before` was taken: it may have committed a number the read
   * of the key's last number did not see yet, so read again before asking (else a message merely
   * committed a moment ago would be asked for).
   */
  toAsk(
    consumer: string,
    key: string,
    last: number | undefined,
    open: readonly number[],
    before: HeldSnapshot,
  ): number[] | null {
    if (last === undefined && !this.fromFirst) return [];
    const entry = this.held.get(JSON.stringify([consumer, key]));
    if ((entry?.ended ?? 0) !== before.ended) return null;
    return open
      .filter((n) => !before.numbers.has(n) && entry?.numbers.has(n) !== true)
      .slice(0, this.maxSequences);
  }

  /** Asks; null when no answer came (the error went to `onError`). */
  async ask(consumer: string, key: string, sequences: number[]): Promise<GapRepairAnswer | null> {
    const topic =
      typeof this.options.topic === 'function' ? this.options.topic(consumer) : this.options.topic;
    const request: GapRepairRequest = { topic, key, consumer, sequences };
    try {
      const answer = await this.options.client.request(request);
      this.options.onAnswer?.(request, answer);
      return answer;
    } catch (error) {
      this.options.onError?.(request, error);
      return null;
    }
  }
}
