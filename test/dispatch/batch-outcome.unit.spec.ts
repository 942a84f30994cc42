import {
  OutboxHandlerBusyError,
  PermanentPublishError,
  PublishTimeoutError,
  PublisherUnavailableError,
} from '../../lib';
import {
  batchReport,
  judgeBatch,
  planBatch,
  readPublish,
  releaseSettlement,
  type OutageReaction,
  type PublishAttempt,
  type PublishResult,
  type RetryPolicy,
  type SettleResult,
} from '../../lib/dispatch/pipeline/batch-outcome';
import type { PublishOutcome } from '../../lib/publishers/outbox-publisher.interface';
import type { ClaimedRecord, Settlement } from '../../lib/store/ports/outbox-store.port';

const RETRY: RetryPolicy = {
  maxAttempts: 3,
  initialDelayMs: 100,
  maxDelayMs: 1_000,
  factor: 2,
  jitter: 0,
  maxAgeMs: 0,
  retryIf: undefined,
};
const PAUSE_MS = 4_000;
const PROBE_MS = 500;
const HELD_MS = 250;

function rec(
  id: string,
  {
    attempts = 1,
    key = `k${id}`,
    ageMs = 0,
    lane,
  }: { attempts?: number; key?: string | null; ageMs?: number; lane?: string } = {},
): ClaimedRecord {
  return {
    id,
    messageId: `m${id}`,
    topic: 'orders',
    key,
    type: 'OrderPlaced',
    payload: '{}',
    headers: {},
    attempts,
    createdAt: new Date(0),
    ageMs,
    ...(lane === undefined ? {} : { lane }),
  };
}

const ok: PublishOutcome = { ok: true };
const fail = (error: unknown): PublishOutcome => ({ ok: false, error });
const unsent = (error: unknown): PublishOutcome => ({ ok: false, error, sent: false });
const boom = new Error('boom');
const unavailable = new PublisherUnavailableError('connection refused');
const slow = new PublishTimeoutError(5_000);
const rejected = new PermanentPublishError('rejected by broker');
/** What LocalPublisher answers for a message whose key a handler call still holds. */
const busy = new OutboxHandlerBusyError('a call of its key is still running', 'm0');
/** What shutdown aborts a publish with. */
const stopped = new PublisherUnavailableError('dispatcher shutting down');
/** How a settlement records `stopped`. */
const stoppedRecorded = {
  error: 'PublisherUnavailableError: dispatcher shutting down',
  errorClass: 'PublisherUnavailableError',
} as const;
/** How a settlement records `slow`. */
const slowRecorded = {
  error: 'PublishTimeoutError: No broker acknowledgement within 5000 ms',
  errorClass: 'PublishTimeoutError',
} as const;

interface Case {
  name: string;
  records: ClaimedRecord[];
  /** What the publish call did; omitted when the batch is not published at all. */
  publish?: PublishAttempt | 'shutdown';
  retry?: Partial<RetryPolicy>;
  deadAdvancesKey?: boolean;
  probe?: boolean;
  /** The monotonic clock when the batch would be published, against a deadline of 1000. */
  now?: number;
  settlement: Settlement;
  reaction?: OutageReaction;
}

// Every record of these batches was created at time 0 (rec), so every settlement bounds them so.
const none = {
  delivered: [],
  retry: [],
  dead: [],
  release: [],
  advancedKeys: [],
  createdRange: { from: new Date(-1), to: new Date(1) },
};
const pauseOf = (
  error: unknown,
  what: string,
  counted: string,
  probe: boolean,
): OutageReaction => ({ kind: 'pause', error, what, counted, probe });
const resume: OutageReaction = { kind: 'resume' };
const returned = (...outcomes: PublishOutcome[]): PublishAttempt => ({
  kind: 'returned',
  outcomes,
});

/** Plans, publishes (as `publish` says), reads and judges a batch, as the dispatcher does. */
function settle(c: Case): {
  settlement: Settlement;
  reaction: OutageReaction | undefined;
  fresh: readonly ClaimedRecord[];
  hookErrors: readonly unknown[];
} {
  const retry = { ...RETRY, ...c.retry };
  const plan = planBatch(c.records, retry.maxAttempts, c.now ?? 0, 1_000);
  let result: PublishResult;
  let reaction: OutageReaction | undefined;
  if (plan.skip !== undefined) {
    if (c.publish !== undefined) throw new Error(`${c.name}: the batch is not published`);
    result = plan.skip;
  } else if (c.publish === undefined) {
    throw new Error(`${c.name}: the batch is published; say how`);
  } else if (c.publish === 'shutdown') {
    result = { kind: 'shutdown' };
  } else {
    ({ result, reaction } = readPublish(c.publish, plan.fresh.length));
  }
  const judged = judgeBatch({
    records: c.records,
    result,
    retry,
    deadAdvancesKey: c.deadAdvancesKey ?? false,
    outagePauseMs: PAUSE_MS,
    probeEveryMs: c.probe === true ? PROBE_MS : undefined,
    heldReleaseMs: HELD_MS,
  });
  return {
    settlement: judged.settlement,
    reaction,
    fresh: plan.fresh,
    hookErrors: judged.hookErrors,
  };
}

describe('batch outcome', () => {
  const cases: Case[] = [
    {
      name: 'all ok: delivered, their keys advance',
      records: [rec('1'), rec('2', { key: null }), rec('3')],
      publish: returned(ok, ok, ok),
      settlement: { ...none, delivered: ['1', '2', '3'], advancedKeys: ['k1', 'k3'] },
      reaction: resume,
    },
    {
      // A re-drive copy in a lane of its own (rows/redrive-lane.ts) advances its lane: its next
      // copy is promoted, not its key's next live message.
      name: "a re-drive copy advances its lane, not its key's",
      records: [rec('1', { key: 'k1', lane: 'lane-of-k1' }), rec('2', { key: 'k1' })],
      publish: returned(ok, ok),
      settlement: { ...none, delivered: ['1', '2'], advancedKeys: ['lane-of-k1', 'k1'] },
      reaction: resume,
    },
    {
      name: 'mixed ok / retryable / permanent',
      records: [rec('1'), rec('2', { attempts: 2 }), rec('3')],
      publish: returned(ok, fail(boom), fail(rejected)),
      settlement: {
        ...none,
        delivered: ['1'],
        retry: [{ id: '2', delayMs: 200, error: 'Error: boom', errorClass: 'Error' }],
        dead: [
          {
            id: '3',
            error: 'PermanentPublishError: rejected by broker',
            errorClass: 'PermanentPublishError',
          },
        ],
        advancedKeys: ['k1'],
      },
      reaction: resume,
    },
    {
      name: "a dead message advances its key with onDeadLetter 'skip'",
      records: [rec('1'), rec('2')],
      publish: returned(ok, fail(rejected)),
      deadAdvancesKey: true,
      settlement: {
        ...none,
        delivered: ['1'],
        dead: [
          {
            id: '2',
            error: 'PermanentPublishError: rejected by broker',
            errorClass: 'PermanentPublishError',
            advancesKey: true,
          },
        ],
        advancedKeys: ['k1', 'k2'],
      },
      reaction: resume,
    },
    {
      name: 'PermanentPublishError for every message: dead, and the broker was reached',
      records: [rec('1'), rec('2')],
      publish: returned(fail(rejected), fail(rejected)),
      settlement: {
        ...none,
        dead: [
          {
            id: '1',
            error: 'PermanentPublishError: rejected by broker',
            errorClass: 'PermanentPublishError',
          },
          {
            id: '2',
            error: 'PermanentPublishError: rejected by broker',
            errorClass: 'PermanentPublishError',
          },
        ],
      },
      reaction: resume,
    },
    {
      name: 'every message failed with an ordinary error: retried, and the broker was reached',
      records: [rec('1'), rec('2')],
      publish: returned(fail(boom), fail(boom)),
      settlement: {
        ...none,
        retry: [
          { id: '1', delayMs: 100, error: 'Error: boom', errorClass: 'Error' },
          { id: '2', delayMs: 100, error: 'Error: boom', errorClass: 'Error' },
        ],
      },
      reaction: resume,
    },
    {
      name: 'every message held back by a running call of its key: no outage, released for a poll with no attempt history',
      records: [rec('1'), rec('2')],
      publish: returned(unsent(busy), unsent(busy)),
      settlement: {
        ...none,
        release: [
          { id: '1', delayMs: HELD_MS, error: null, errorClass: null },
          { id: '2', delayMs: HELD_MS, error: null, errorClass: null },
        ],
      },
      reaction: { kind: 'none' },
    },
    {
      name: 'held back beside a delivered message: the publish went through, the held one waits a poll',
      records: [rec('1'), rec('2')],
      publish: returned(unsent(busy), ok),
      settlement: {
        ...none,
        delivered: ['2'],
        release: [{ id: '1', delayMs: HELD_MS, error: null, errorClass: null }],
        advancedKeys: ['k2'],
      },
      reaction: resume,
    },
    {
      name: 'held back beside an unreachable broker: the rest of the batch is the outage',
      records: [rec('1'), rec('2')],
      publish: returned(unsent(busy), fail(unavailable)),
      settlement: {
        ...none,
        release: [
          {
            id: '1',
            delayMs: PAUSE_MS,
            error: 'PublisherUnavailableError: connection refused',
            errorClass: 'PublisherUnavailableError',
          },
          {
            id: '2',
            delayMs: PAUSE_MS,
            error: 'PublisherUnavailableError: connection refused',
            errorClass: 'PublisherUnavailableError',
          },
        ],
      },
      reaction: pauseOf(
        unavailable,
        'every publish of the batch failed',
        'no attempt counted',
        true,
      ),
    },
    {
      name: 'PublisherUnavailableError for the whole batch: outage, released for the pause',
      records: [rec('1'), rec('2', { attempts: 3 })],
      publish: returned(fail(unavailable), fail(unavailable)),
      settlement: {
        ...none,
        release: [
          {
            id: '1',
            delayMs: PAUSE_MS,
            error: 'PublisherUnavailableError: connection refused',
            errorClass: 'PublisherUnavailableError',
          },
          {
            id: '2',
            delayMs: PAUSE_MS,
            error: 'PublisherUnavailableError: connection refused',
            errorClass: 'PublisherUnavailableError',
          },
        ],
      },
      reaction: pauseOf(
        unavailable,
        'every publish of the batch failed',
        'no attempt counted',
        true,
      ),
    },
    {
      name: 'outage with a probeable publisher: released until two probes later at most',
      records: [rec('1')],
      publish: returned(fail(unavailable)),
      probe: true,
      settlement: {
        ...none,
        release: [
          {
            id: '1',
            delayMs: 2 * PROBE_MS,
            error: 'PublisherUnavailableError: connection refused',
            errorClass: 'PublisherUnavailableError',
          },
        ],
      },
      reaction: pauseOf(
        unavailable,
        'every publish of the batch failed',
        'no attempt counted',
        true,
      ),
    },
    {
      name: 'one message unavailable while another went through: that message is retried',
      records: [rec('1'), rec('2')],
      publish: returned(ok, fail(unavailable)),
      settlement: {
        ...none,
        delivered: ['1'],
        retry: [
          {
            id: '2',
            delayMs: 100,
            error: 'PublisherUnavailableError: connection refused',
            errorClass: 'PublisherUnavailableError',
          },
        ],
        advancedKeys: ['k1'],
      },
      reaction: resume,
    },
    {
      name: 'the publisher threw: outage, released, the broker is probed',
      records: [rec('1'), rec('2')],
      publish: { kind: 'threw', error: boom },
      settlement: {
        ...none,
        release: [
          { id: '1', delayMs: PAUSE_MS, error: 'Error: boom', errorClass: 'Error' },
          { id: '2', delayMs: PAUSE_MS, error: 'Error: boom', errorClass: 'Error' },
        ],
      },
      reaction: pauseOf(boom, 'publisher failed', 'no attempt counted', true),
    },
    {
      name: 'the publish deadline passed: each message counts an attempt and is retried',
      records: [rec('1'), rec('2', { attempts: 2 })],
      publish: { kind: 'timed-out', error: slow },
      settlement: {
        ...none,
        retry: [
          {
            id: '1',
            delayMs: 100,
            ...slowRecorded,
          },
          {
            id: '2',
            delayMs: 200,
            ...slowRecorded,
          },
        ],
      },
      reaction: pauseOf(
        slow,
        'publish did not finish in time',
        'each message counts an attempt',
        false,
      ),
    },
    {
      name: 'the publish deadline passed on a last attempt: dead',
      records: [rec('1', { attempts: 3 })],
      publish: { kind: 'timed-out', error: slow },
      settlement: {
        ...none,
        dead: [
          {
            id: '1',
            ...slowRecorded,
          },
        ],
      },
      reaction: pauseOf(
        slow,
        'publish did not finish in time',
        'each message counts an attempt',
        false,
      ),
    },
    {
      name: "the deadline passed and the publisher's answer to the abort came in time: what the broker confirmed is delivered, what was never written gets its attempt back",
      records: [rec('1'), rec('2'), rec('3')],
      publish: { kind: 'timed-out', error: slow, late: [ok, fail(slow), unsent(slow)] },
      settlement: {
        ...none,
        delivered: ['1'],
        advancedKeys: ['k1'],
        retry: [
          {
            id: '2',
            delayMs: 100,
            ...slowRecorded,
          },
        ],
        release: [{ id: '3', delayMs: 0, error: null, errorClass: null }],
      },
      // Something went through, but the deadline passed: claims still slow down.
      reaction: pauseOf(
        slow,
        'publish did not finish in time',
        'each message counts an attempt',
        false,
      ),
    },
    {
      name: "the deadline passed and the abort's answer says nothing was written: an outage, no attempt counted",
      records: [rec('1'), rec('2')],
      publish: { kind: 'timed-out', error: slow, late: [unsent(slow), unsent(slow)] },
      settlement: {
        ...none,
        release: [
          {
            id: '1',
            delayMs: PAUSE_MS,
            ...slowRecorded,
          },
          {
            id: '2',
            delayMs: PAUSE_MS,
            ...slowRecorded,
          },
        ],
      },
      reaction: pauseOf(slow, 'no message of the batch could be sent', 'no attempt counted', true),
    },
    {
      name: 'shutdown aborted the publish and it answered: what the broker confirmed is delivered, what was never written gets its attempt back, the rest counts a timed-out attempt',
      records: [rec('1'), rec('2'), rec('3'), rec('4')],
      publish: {
        kind: 'stopped',
        error: stopped,
        late: [ok, fail(stopped), unsent(stopped), fail(rejected)],
      },
      settlement: {
        ...none,
        delivered: ['1'],
        advancedKeys: ['k1'],
        retry: [{ id: '2', delayMs: 100, ...stoppedRecorded }],
        dead: [
          {
            id: '4',
            error: 'PermanentPublishError: rejected by broker',
            errorClass: 'PermanentPublishError',
          },
        ],
        release: [{ id: '3', delayMs: 0, error: null, errorClass: null }],
      },
      // Shutdown, not the broker, ended it: claims neither pause nor resume.
      reaction: { kind: 'none' },
    },
    {
      name: "shutdown's abort answered with the publisher's own unavailability: each message written counts an attempt, never an outage's release",
      records: [rec('1'), rec('2')],
      publish: { kind: 'stopped', error: stopped, late: [fail(unavailable), unsent(unavailable)] },
      settlement: {
        ...none,
        retry: [
          {
            id: '1',
            delayMs: 100,
            error: 'PublisherUnavailableError: connection refused',
            errorClass: 'PublisherUnavailableError',
          },
        ],
        release: [{ id: '2', delayMs: 0, error: null, errorClass: null }],
      },
      reaction: { kind: 'none' },
    },
    {
      name: "shutdown's abort answered that nothing was written: released at once, no attempt counted, no outage",
      records: [rec('1'), rec('2')],
      publish: { kind: 'stopped', error: stopped, late: [unsent(stopped), unsent(stopped)] },
      settlement: {
        ...none,
        release: [
          { id: '1', delayMs: 0, error: null, errorClass: null },
          { id: '2', delayMs: 0, error: null, errorClass: null },
        ],
      },
      reaction: { kind: 'none' },
    },
    {
      name: "shutdown's abort answered by a call of its key still running: held back, no attempt counted",
      records: [rec('1'), rec('2')],
      publish: { kind: 'stopped', error: stopped, late: [ok, fail(busy)] },
      settlement: {
        ...none,
        delivered: ['1'],
        advancedKeys: ['k1'],
        release: [{ id: '2', delayMs: HELD_MS, error: null, errorClass: null }],
      },
      reaction: { kind: 'none' },
    },
    {
      name: 'shutdown aborted the publish and it threw: every message may be at the broker, a timed-out attempt each',
      records: [rec('1'), rec('2', { attempts: 3 })],
      publish: { kind: 'stopped', error: stopped },
      settlement: {
        ...none,
        retry: [{ id: '1', delayMs: 100, ...stoppedRecorded }],
        dead: [{ id: '2', ...stoppedRecorded }],
      },
      reaction: { kind: 'none' },
    },
    {
      name: "shutdown's abort answered with the wrong number of outcomes: as no answer",
      records: [rec('1'), rec('2')],
      publish: { kind: 'stopped', error: stopped, late: [ok] },
      settlement: {
        ...none,
        retry: [
          { id: '1', delayMs: 100, ...stoppedRecorded },
          { id: '2', delayMs: 100, ...stoppedRecorded },
        ],
      },
      reaction: { kind: 'none' },
    },
    {
      name: "an answer to the abort with the wrong number of outcomes says nothing: the deadline's reading stands",
      records: [rec('1'), rec('2')],
      publish: { kind: 'timed-out', error: slow, late: [ok] },
      settlement: {
        ...none,
        retry: [
          {
            id: '1',
            delayMs: 100,
            ...slowRecorded,
          },
          {
            id: '2',
            delayMs: 100,
            ...slowRecorded,
          },
        ],
      },
      reaction: pauseOf(
        slow,
        'publish did not finish in time',
        'each message counts an attempt',
        false,
      ),
    },
    {
      name: 'every message timed out (some unavailable): a pause, but the attempts count',
      records: [rec('1'), rec('2')],
      publish: returned(fail(slow), fail(unavailable)),
      settlement: {
        ...none,
        retry: [
          {
            id: '1',
            delayMs: 100,
            ...slowRecorded,
          },
          {
            id: '2',
            delayMs: 100,
            error: 'PublisherUnavailableError: connection refused',
            errorClass: 'PublisherUnavailableError',
          },
        ],
      },
      reaction: pauseOf(
        slow,
        'every publish of the batch timed out',
        'each counts an attempt',
        false,
      ),
    },
    {
      name: 'the first message timed out, the rest were never sent: only the first counts an attempt',
      records: [rec('1'), rec('2'), rec('3')],
      publish: returned(fail(slow), unsent(slow), unsent(slow)),
      settlement: {
        ...none,
        retry: [
          {
            id: '1',
            delayMs: 100,
            ...slowRecorded,
          },
        ],
        release: [
          { id: '2', delayMs: 0, error: null, errorClass: null },
          { id: '3', delayMs: 0, error: null, errorClass: null },
        ],
      },
      reaction: pauseOf(
        slow,
        'every publish of the batch timed out',
        'each message sent counts an attempt',
        false,
      ),
    },
    {
      name: 'no message of the batch sent: an outage, released for the pause',
      records: [rec('1'), rec('2')],
      publish: returned(unsent(slow), unsent(slow)),
      settlement: {
        ...none,
        release: [
          {
            id: '1',
            delayMs: PAUSE_MS,
            ...slowRecorded,
          },
          {
            id: '2',
            delayMs: PAUSE_MS,
            ...slowRecorded,
          },
        ],
      },
      reaction: pauseOf(slow, 'no message of the batch could be sent', 'no attempt counted', true),
    },
    {
      name: 'one delivered, one never sent: the other goes back with its attempt given back',
      records: [rec('1'), rec('2')],
      publish: returned(ok, unsent(boom)),
      settlement: {
        ...none,
        delivered: ['1'],
        release: [{ id: '2', delayMs: 0, error: null, errorClass: null }],
        advancedKeys: ['k1'],
      },
      reaction: resume,
    },
    {
      name: 'a permanent failure stays one, sent or not: dead',
      records: [rec('1'), rec('2')],
      publish: returned(ok, unsent(rejected)),
      settlement: {
        ...none,
        delivered: ['1'],
        advancedKeys: ['k1'],
        dead: [
          {
            id: '2',
            error: 'PermanentPublishError: rejected by broker',
            errorClass: 'PermanentPublishError',
          },
        ],
      },
      reaction: resume,
    },
    {
      name: 'fewer outcomes than messages: the publisher broke its contract, released',
      records: [rec('1'), rec('2')],
      publish: returned(ok),
      settlement: {
        ...none,
        release: [
          {
            id: '1',
            delayMs: PAUSE_MS,
            error: 'Error: Publisher returned 1 outcomes for 2 messages',
            errorClass: 'Error',
          },
          {
            id: '2',
            delayMs: PAUSE_MS,
            error: 'Error: Publisher returned 1 outcomes for 2 messages',
            errorClass: 'Error',
          },
        ],
      },
      reaction: expect.objectContaining({
        kind: 'pause',
        what: 'publisher broke its contract',
        counted: 'no attempt counted',
        probe: false,
      }) as OutageReaction,
    },
    {
      name: 'more outcomes than messages: the same',
      records: [rec('1')],
      publish: returned(ok, ok),
      settlement: {
        ...none,
        release: [
          {
            id: '1',
            delayMs: PAUSE_MS,
            error: 'Error: Publisher returned 2 outcomes for 1 messages',
            errorClass: 'Error',
          },
        ],
      },
      reaction: expect.objectContaining({ what: 'publisher broke its contract' }) as OutageReaction,
    },
    {
      name: 'a failure on attempt retry.maxAttempts: dead',
      records: [rec('1', { attempts: 3 }), rec('2', { attempts: 2 })],
      publish: returned(fail(boom), fail(boom)),
      settlement: {
        ...none,
        retry: [{ id: '2', delayMs: 200, error: 'Error: boom', errorClass: 'Error' }],
        dead: [{ id: '1', error: 'Error: boom', errorClass: 'Error' }],
      },
      reaction: resume,
    },
    {
      name: 'a retry that would end past retry.maxAgeMs: dead',
      records: [rec('1', { ageMs: 950 }), rec('2', { ageMs: 900 })],
      publish: returned(fail(boom), fail(boom)),
      retry: { maxAgeMs: 1_000 },
      settlement: {
        ...none,
        retry: [{ id: '2', delayMs: 100, error: 'Error: boom', errorClass: 'Error' }],
        dead: [{ id: '1', error: 'Error: boom', errorClass: 'Error' }],
      },
      reaction: resume,
    },
    {
      name: 'retryIf says no: dead at once',
      records: [rec('1'), rec('2')],
      publish: returned(fail(boom), fail(new Error('flaky'))),
      retry: { retryIf: (error) => !(error instanceof Error && error.message === 'boom') },
      settlement: {
        ...none,
        retry: [{ id: '2', delayMs: 100, error: 'Error: flaky', errorClass: 'Error' }],
        dead: [{ id: '1', error: 'Error: boom', errorClass: 'Error' }],
      },
      reaction: resume,
    },
    {
      name: 'retryIf throws: the retry is allowed',
      records: [rec('1')],
      publish: returned(fail(boom)),
      retry: {
        retryIf: () => {
          throw new Error('hook bug');
        },
      },
      settlement: {
        ...none,
        retry: [{ id: '1', delayMs: 100, error: 'Error: boom', errorClass: 'Error' }],
      },
      reaction: resume,
    },
    {
      name: 'a PermanentPublishError is dead even where retryIf allows a retry',
      records: [rec('1')],
      publish: returned(fail(rejected)),
      retry: { retryIf: () => true },
      settlement: {
        ...none,
        dead: [
          {
            id: '1',
            error: 'PermanentPublishError: rejected by broker',
            errorClass: 'PermanentPublishError',
          },
        ],
      },
      reaction: resume,
    },
    {
      name: 'claimed more often than retry.maxAttempts: dead without publishing, the rest published',
      records: [rec('1'), rec('2', { attempts: 4 }), rec('3')],
      publish: returned(ok, ok),
      settlement: {
        ...none,
        delivered: ['1', '3'],
        dead: [
          {
            id: '2',
            errorClass: 'Error',
            error:
              'Error: claimed 4 times, more than retry.maxAttempts (3), without an outcome: the dispatchers holding it crashed or lost their lease while publishing',
          },
        ],
        advancedKeys: ['k1', 'k3'],
      },
      reaction: resume,
    },
    {
      name: 'every record exhausted: nothing is published, and claiming does not react',
      records: [rec('1', { attempts: 5 })],
      now: 2_000,
      settlement: {
        ...none,
        dead: [
          {
            id: '1',
            errorClass: 'Error',
            error:
              'Error: claimed 5 times, more than retry.maxAttempts (3), without an outcome: the dispatchers holding it crashed or lost their lease while publishing',
          },
        ],
      },
    },
    {
      name: 'lapsed: the lease deadline passed before publishing, released at once',
      records: [rec('1'), rec('2')],
      now: 1_000,
      settlement: {
        ...none,
        release: [
          { id: '1', delayMs: 0, error: null, errorClass: null },
          { id: '2', delayMs: 0, error: null, errorClass: null },
        ],
      },
    },
    {
      name: 'lapsed with an exhausted record: that one is still dead',
      records: [rec('1'), rec('2', { attempts: 4 })],
      now: 1_500,
      settlement: {
        ...none,
        dead: [
          {
            id: '2',
            errorClass: 'Error',
            error:
              'Error: claimed 4 times, more than retry.maxAttempts (3), without an outcome: the dispatchers holding it crashed or lost their lease while publishing',
          },
        ],
        release: [{ id: '1', delayMs: 0, error: null, errorClass: null }],
      },
    },
    {
      name: 'shutdown came before the publish began: released at once, last_error untouched',
      records: [rec('1'), rec('2')],
      publish: 'shutdown',
      settlement: {
        ...none,
        release: [
          { id: '1', delayMs: 0, error: null, errorClass: null },
          { id: '2', delayMs: 0, error: null, errorClass: null },
        ],
      },
    },
  ];

  it.each(cases)('$name', (c) => {
    const { settlement, reaction } = settle(c);
    expect(settlement).toEqual(c.settlement);
    expect(reaction).toEqual(c.reaction);
  });

  it('publishes only the fresh records, in claim order', () => {
    const records = [rec('1'), rec('2', { attempts: 9 }), rec('3')];
    expect(planBatch(records, 3, 0, 1_000).fresh.map((r) => r.id)).toEqual(['1', '3']);
  });

  it('holds back the records of a run behind an exhausted record of their key, and only those', () => {
    const records = [
      rec('10', { key: 'a' }),
      rec('11', { key: 'a', attempts: 9 }),
      rec('12', { key: 'a' }),
      rec('9', { key: 'b' }),
      rec('13', { key: null }),
      rec('100', { key: 'a' }),
    ];
    const plan = planBatch(records, 3, 0, 1_000);
    expect(plan.fresh.map((r) => r.id)).toEqual(['10', '12', '9', '13', '100']);
    expect([...plan.held].sort()).toEqual(['100', '12']);
  });

  it('hands the errors a retryIf threw to the dispatcher, in order', () => {
    const first = new Error('first');
    const second = new Error('second');
    const errors = [first, second];
    const { hookErrors } = settle({
      name: 'two throwing hooks',
      records: [rec('1'), rec('2')],
      publish: returned(fail(boom), fail(boom)),
      retry: {
        retryIf: () => {
          throw errors.shift() ?? new Error('called too often');
        },
      },
      settlement: none,
    });
    expect(hookErrors).toEqual([first, second]);
  });

  it('jitters retry delays with the random source it is given', () => {
    const { settlement } = judgeBatch({
      records: [rec('1', { attempts: 2 })],
      result: { kind: 'outcomes', outcomes: [fail(boom)] },
      retry: { ...RETRY, jitter: 0.5 },
      deadAdvancesKey: false,
      outagePauseMs: PAUSE_MS,
      heldReleaseMs: HELD_MS,
      probeEveryMs: undefined,
      random: () => 1,
    });
    expect(settlement.retry).toEqual([
      { id: '1', delayMs: 100, error: 'Error: boom', errorClass: 'Error' },
    ]);
  });

  it('a late claim is released whole, due at once, with nothing advanced', () => {
    expect(releaseSettlement([rec('1'), rec('2', { attempts: 7 })])).toEqual({
      ...none,
      release: [
        { id: '1', delayMs: 0, error: null, errorClass: null },
        { id: '2', delayMs: 0, error: null, errorClass: null },
      ],
    });
  });

  it("bounds the rows' creation times, a millisecond wider each way (they are stored finer than read)", () => {
    const at = (ms: number, id: string): ClaimedRecord => ({ ...rec(id), createdAt: new Date(ms) });
    const records = [at(5_000, '1'), at(2_000, '2'), at(9_000, '3')];
    expect(releaseSettlement(records).createdRange).toEqual({
      from: new Date(1_999),
      to: new Date(9_001),
    });
    expect(releaseSettlement([]).createdRange).toBeUndefined();
  });
});

describe('batch report (fencing)', () => {
  const settlement: Settlement = {
    delivered: ['1', '2'],
    retry: [{ id: '3', delayMs: 100, error: 'Error: boom', errorClass: 'Error' }],
    dead: [{ id: '4', error: 'Error: boom', errorClass: 'Error' }],
    release: [{ id: '5', delayMs: 0, error: null, errorClass: null }],
    advancedKeys: ['k1'],
  };

  it.each<{ name: string; settled: SettleResult; fenced: number }>([
    {
      name: 'every row still held: none fenced',
      settled: { kind: 'settled', changed: 5, sole: true },
      fenced: 0,
    },
    {
      name: 'two rows taken over by another dispatcher: fenced',
      settled: { kind: 'settled', changed: 3, sole: true },
      fenced: 2,
    },
    {
      name: 'after a retried settle fewer changed rows prove nothing',
      settled: { kind: 'settled', changed: 3, sole: false },
      fenced: 0,
    },
    { name: 'unsettled: nothing known', settled: { kind: 'unsettled' }, fenced: 0 },
  ])('$name', ({ settled, fenced }) => {
    expect(batchReport(5, settlement, settled, 12)).toEqual({
      claimed: 5,
      published: 2,
      retried: 1,
      deadLettered: 1,
      released: 1,
      fenced,
      durationMs: 12,
    });
  });
});
