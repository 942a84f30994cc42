import type { OutboxRecord } from '../../message/outbox-record.interface';
import type { PublishOutcome } from '../outbox-publisher.interface';
import { pastPublishDeadline } from '../publish-deadline';
import { abortReason, answerAll } from './publish-abort';

/** The outcomes of one publish by record index, filled in as the broker answers. */
export type PublishOutcomes = (PublishOutcome | undefined)[];

/** A message on its way out: its position in the publish, and what the broker's client needs. */
export interface RoundItem {
  readonly index: number;
  /** Told apart from an outcome by `ok`, which an item never has. */
  readonly ok?: never;
}

/** What one broker's publisher gives {@link publishRound}: its client calls, nothing else. */
export interface PublishRoundCalls<I extends RoundItem> {
  /**
   * The item of one record, or the outcome of a record that can never be sent as it is. A throw
   * (a routing function of the app's) fails that record alone.
   */
  item(record: OutboxRecord, index: number): I | PublishOutcome;
  /**
   * Checks that ask the broker before anything is written (a lookup that may fail some
   * messages); answers the items still to send. The deadline is read after it.
   */
  prepare?(items: I[], outcomes: PublishOutcomes, signal: AbortSignal): Promise<I[]>;
  /** Writes the items and records each one's outcome at its index; called before the deadline. */
  send(items: readonly I[], outcomes: PublishOutcomes, signal: AbortSignal): Promise<void>;
  /** How an aborted publish's messages end their message: 'before Kafka answered'. */
  readonly aborted?: string;
  /** The failure of a message the broker left unanswered, the publish not aborted. */
  unanswered(): Error;
}

/**
 * One call of `publish()`: each record made into the broker's item (or failed alone), the
 * deadline read on the clock right before anything is written (past it, nothing is and every
 * message goes back without an attempt), then the broker's send, and an outcome for every
 * message, the ones the broker left unanswered failing with the abort reason or `unanswered()`.
 */
export async function publishRound<I extends RoundItem>(
  records: readonly OutboxRecord[],
  signal: AbortSignal,
  calls: PublishRoundCalls<I>,
): Promise<PublishOutcome[]> {
  const outcomes: PublishOutcomes = new Array<PublishOutcome | undefined>(records.length).fill(
    undefined,
  );
  let items: I[] = [];
  records.forEach((record, index) => {
    let item: I | PublishOutcome;
    try {
      item = calls.item(record, index);
    } catch (error) {
      outcomes[index] = { ok: false, error };
      return;
    }
    if (item.ok === undefined) items.push(item);
    else outcomes[index] = item;
  });
  if (items.length > 0 && calls.prepare !== undefined) {
    items = await calls.prepare(items, outcomes, signal);
  }
  if (items.length > 0 && pastPublishDeadline(signal)) {
    // Nothing was written: each goes back without an attempt.
    failUnanswered(items, outcomes, abortReason(signal, calls.aborted), false);
  } else if (items.length > 0) {
    await calls.send(items, outcomes, signal);
  }
  return answerAll(outcomes, signal, calls.aborted, () => calls.unanswered());
}

/** Fails what `items` have no outcome for yet; `sent: false` when none of them was written. */
export function failUnanswered(
  items: readonly { readonly index: number }[],
  outcomes: PublishOutcomes,
  error: unknown,
  sent = true,
): void {
  const outcome: PublishOutcome = sent ? { ok: false, error } : { ok: false, error, sent };
  for (const { index } of items) outcomes[index] ??= outcome;
}
