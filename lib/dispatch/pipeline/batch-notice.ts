import { describeError, errorClassOf } from '../../internal/describe-error';
import type {
  OutboxBatchReport,
  OutboxObserver,
  OutboxPublishedRecord,
} from '../../observers/outbox-observer.interface';
import type { ClaimedRecord } from '../../store/ports/outbox-store.port';
import type { FallbackAnswer, Verdict } from './batch-outcome';
import type { BatchOrigin } from './delivery-batch';
import type { DispatcherLog, LogFields } from '../dispatcher-log';
import { TopicLogLimit } from './topic-log-limit';

/** A topic's failed attempts are logged at warn once per this; the others at verbose. */
const FAILED_ATTEMPT_LOG_INTERVAL_MS = 30_000;

/** The facts of one message's line, as fields for a log indexer. */
function messageFields(
  record: ClaimedRecord,
  error: unknown,
  batch: string,
  policy: string,
): LogFields {
  return {
    ...(policy === 'default' ? {} : { policy }),
    batch,
    messageId: record.messageId,
    key: record.key ?? undefined,
    topic: record.topic,
    type: record.type,
    attempt: record.attempts,
    errorClass: errorClassOf(error),
    err: { type: errorClassOf(error), message: describeError(error) },
  };
}

/**
 * Tells the log and the observer what became of a settled batch: a line per batch at verbose,
 * each failed attempt with its reason (at warn once per topic per interval), each dead letter.
 */
export class BatchNotice {
  private readonly failedAttempts = new TopicLogLimit(FAILED_ATTEMPT_LOG_INTERVAL_MS);

  constructor(
    private readonly observer: OutboxObserver,
    private readonly log: DispatcherLog,
    /** The name of the policy a message of this event type is delivered under. */
    private readonly policyName: (eventType: string) => string = () => 'default',
  ) {}

  /** `(type to topic)`, with the policy when the type has its own. */
  private about(record: ClaimedRecord): string {
    const policy = this.policyName(record.type);
    return `(${record.type} to ${record.topic}${policy === 'default' ? '' : `, policy '${policy}'`})`;
  }

  /** `batch`: the batch's id on its lines (`batchIdOf`). */
  settled(
    batch: string,
    origin: BatchOrigin,
    records: readonly ClaimedRecord[],
    verdicts: readonly Verdict[],
    report: OutboxBatchReport,
    answeredAfterClaimMs: number,
  ): void {
    if (report.fenced > 0) {
      this.log.warn(
        origin === 'partition owner'
          ? `${report.fenced} message(s) of a batch were not settled here: another dispatcher took their partitions over after this one's heartbeat lapsed; their outcome here was discarded`
          : `${report.fenced} message(s) of a batch were taken over by another dispatcher after this one's lease expired; their outcome here was discarded`,
        { batch, fenced: report.fenced },
      );
    }
    const { claimed, published, retried, deadLettered, released, fenced } = report;
    const durationMs = Math.round(report.durationMs);
    this.log.verbose(
      `Batch: claimed ${claimed}, published ${published}, retried ${retried}, dead ${deadLettered}, released ${released}, fenced ${fenced} in ${durationMs} ms`,
      { batch, claimed, published, retried, deadLettered, released, fenced, durationMs },
    );
    // A copy of every delivered record only for an observer that reads them: without one it
    // was an object per message for the garbage collector. Object.assign, not a spread with
    // one more property after it (`{ ...record, latencyMs }`): see toClaimedRecord.
    const delivered: OutboxPublishedRecord[] | undefined =
      this.observer.onPublished === undefined ? undefined : [];
    records.forEach((record, i) => {
      const verdict = verdicts[i];
      if (verdict?.kind === 'delivered')
        delivered?.push(
          Object.assign({}, record, { latencyMs: record.ageMs + answeredAfterClaimMs }),
        );
      else if (verdict?.kind === 'retry') {
        this.failedAttempt(batch, record, verdict.error, verdict.delayMs);
        this.safely(() => this.observer.onRetry?.(record, verdict.error, verdict.delayMs));
      } else if (verdict?.kind === 'dead') {
        this.log.warn(
          `Message ${record.messageId} ${this.about(record)} dead-lettered ${verdict.unpublished === true ? 'unpublished, expired before any attempt' : `after ${record.attempts} attempt(s)`}: ${describeError(verdict.error)}`,
          messageFields(record, verdict.error, batch, this.policyName(record.type)),
        );
        this.safely(() => this.observer.onDeadLetter?.(record, verdict.error));
      }
    });
    if (delivered !== undefined && delivered.length > 0)
      this.safely(() => this.observer.onPublished?.(delivered));
    this.safely(() => this.observer.onBatch?.(report));
  }

  /** One run of a dead message's fallback: what it did, and so what becomes of the message. */
  fallbackRan(batch: string, record: ClaimedRecord, error: unknown, answer: FallbackAnswer): void {
    const fields = {
      ...messageFields(record, error, batch, this.policyName(record.type)),
      fallback: answer.fallback,
      fallbackOutcome: answer.kind,
    };
    const about = `Message ${record.messageId} ${this.about(record)} was to be dead-lettered (${describeError(error)})`;
    switch (answer.kind) {
      case 'settled':
        this.log.log(`${about}; its fallback ${answer.fallback} settled it`, fields);
        break;
      case 'declined':
        this.log.log(`${about}; its fallback ${answer.fallback} left it dead`, fields);
        break;
      case 'failed':
        this.log.warn(
          `${about}; its fallback ${answer.fallback} failed, so it is dead-lettered: ${describeError(answer.error)}`,
          fields,
        );
        break;
    }
  }

  /** Observer hooks and user callbacks must never stop delivery. */
  safely(fn: () => void): void {
    try {
      fn();
    } catch (error) {
      this.hookThrew(error);
    }
  }

  hookThrew(error: unknown): void {
    this.log.error(`An outbox hook threw: ${describeError(error)}`);
  }

  private failedAttempt(
    batch: string,
    record: ClaimedRecord,
    error: unknown,
    delayMs: number,
  ): void {
    const turn = this.failedAttempts.take(record.topic);
    const quieted =
      turn.loud && turn.quieted > 0
        ? ` (${turn.quieted} more failed attempt(s) on this topic since the last such line, logged at verbose)`
        : '';
    const line = `Message ${record.messageId} ${this.about(record)} failed attempt ${record.attempts}, retrying in ${delayMs} ms: ${describeError(error)}${quieted}`;
    const fields = {
      ...messageFields(record, error, batch, this.policyName(record.type)),
      retryInMs: delayMs,
    };
    if (turn.loud) this.log.warn(line, fields);
    else this.log.verbose(line, fields);
  }
}
