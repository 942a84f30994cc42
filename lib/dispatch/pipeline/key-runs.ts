import type { PublishOutcome } from '../../publishers/outbox-publisher.interface';
import { compareIds } from '../../store/rows/outbox-row.mapper';
import type { ClaimedRecord } from '../../store/ports/outbox-store.port';
import { laneOf } from '../../store/rows/redrive-lane';

/**
 * A batch may hold runs: consecutive messages of one key (the store's claim, under ordering).
 * They are published in rounds: round 1 holds the first message of every key (and every
 * message without a key), round 2 the second message of every key whose first was
 * acknowledged, and so on. A message is sent only after the broker acknowledged the one before
 * it in its key, so no broker can take a later message of a key and refuse an earlier one;
 * keys still go out side by side within a round.
 *
 * Returns the rounds as indexes into `records`, each round in claim order. A batch without
 * runs is one round.
 */
export function keyRounds(records: readonly ClaimedRecord[]): number[][] {
  const runs = new Map<string, number[]>();
  const rounds: number[][] = [[]];
  records.forEach((record, index) => {
    const lane = laneOf(record);
    if (lane === null) {
      rounds[0]?.push(index);
      return;
    }
    const run = runs.get(lane);
    if (run === undefined) runs.set(lane, [index]);
    else run.push(index);
  });
  for (const run of runs.values()) {
    // Queue order is row id order (a key's ids follow its commit order), whatever order the
    // store returned the batch in.
    run.sort((a, b) => compareIds({ id: records[a]?.id ?? '' }, { id: records[b]?.id ?? '' }));
    run.forEach((index, place) => (rounds[place] ??= []).push(index));
  }
  for (const round of rounds) round.sort((a, b) => a - b);
  return rounds;
}

/**
 * Records what one round came to, into `outcomes` (by record index), and returns the keys it
 * stopped: a key whose message failed sends nothing more in this batch, and its later
 * messages go back unpublished.
 */
export function recordRound(
  records: readonly ClaimedRecord[],
  round: readonly number[],
  answers: readonly (PublishOutcome | undefined)[],
  outcomes: (PublishOutcome | undefined)[],
): string[] {
  const stopped: string[] = [];
  round.forEach((index, i) => {
    const answer = answers[i];
    outcomes[index] = answer;
    const record = records[index];
    const lane = record === undefined ? null : laneOf(record);
    if (answer?.ok !== true && lane !== null) stopped.push(lane);
  });
  return stopped;
}
