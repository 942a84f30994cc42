import { keyRounds, recordRound } from '../../lib/dispatch/pipeline/key-runs';
import type { PublishOutcome } from '../../lib/publishers/outbox-publisher.interface';
import type { ClaimedRecord } from '../../lib/store/ports/outbox-store.port';

const record = (id: string, key: string | null): ClaimedRecord => ({
  id,
  messageId: `m-${id}`,
  topic: 't',
  key,
  type: 'T',
  payload: '{}',
  headers: {},
  attempts: 1,
  createdAt: new Date(0),
  ageMs: 0,
});

const idsOf = (records: readonly ClaimedRecord[], rounds: number[][]): string[][] =>
  rounds.map((round) => round.map((i) => records[i]?.id ?? '?'));

describe('keyRounds', () => {
  it("keeps a re-drive copy's lane apart from its key: both go in the first round", () => {
    const records = [record('5', 'a'), { ...record('6', 'a'), lane: 'lane-of-a' }];
    expect(idsOf(records, keyRounds(records))).toEqual([['5', '6']]);
  });

  it('puts a batch without runs in one round, in claim order', () => {
    const records = [record('5', 'a'), record('3', null), record('9', 'b')];
    expect(idsOf(records, keyRounds(records))).toEqual([['5', '3', '9']]);
  });

  it("sends the n-th message of every key's run in round n, in queue (row id) order whatever the claim order", () => {
    // Heads first, as the claim orders them, but the ids of a key out of order in the batch,
    // and ids of different lengths (compared as numbers: 10 comes after 9).
    const records = [
      record('9', 'a'),
      record('7', 'b'),
      record('11', null),
      record('10', 'a'),
      record('8', 'b'),
      record('12', 'a'),
      record('100', 'b'),
    ];
    expect(idsOf(records, keyRounds(records))).toEqual([
      ['9', '7', '11'],
      ['10', '8'],
      ['12', '100'],
    ]);
    const shuffled = [records[5], records[0], records[3]].filter((r) => r !== undefined);
    expect(idsOf(shuffled, keyRounds(shuffled))).toEqual([['9'], ['10'], ['12']]);
  });
});

describe('recordRound', () => {
  it('records each answer by record index and stops the keys whose message failed or got no answer', () => {
    const records = [record('1', 'a'), record('2', 'b'), record('3', null), record('4', 'c')];
    const outcomes: (PublishOutcome | undefined)[] = records.map(() => undefined);
    const failed: PublishOutcome = { ok: false, error: new Error('refused') };
    const stopped = recordRound(records, [0, 1, 2, 3], [{ ok: true }, failed, failed], outcomes);
    expect(outcomes).toEqual([{ ok: true }, failed, failed, undefined]);
    // A keyless failure stops nothing; a missing answer stops its key.
    expect(stopped).toEqual(['b', 'c']);
  });
});
