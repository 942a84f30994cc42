import type { Logger } from '@nestjs/common';
import { PermanentPublishError } from '../../errors/permanent-publish.error';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import { ConcurrencyLimit } from '../../internal/concurrency-limit';
import { describeError } from '../../internal/describe-error';
import type { PublishOutcome } from '../outbox-publisher.interface';
import { abortReason as abortedBy, cancelledAfterGrace, toPermanent } from '../kit/publish-abort';
import { failUnanswered, type PublishOutcomes } from '../kit/publish-round';
import { pastPublishDeadline } from '../publish-deadline';
import {
  classifyAwsError,
  isPermanentEntryFailure,
  type AwsBatchEntryFailure,
} from './aws-error.classifier';

/** Entries one `SendMessageBatch` or `PublishBatch` call takes at most. */
export const AWS_MAX_BATCH_ENTRIES = 10;

/** One message on its way out: its position in the publish, where it goes, and its entry. */
export interface AwsBatchItem<E> {
  readonly index: number;
  /** The queue URL or topic ARN. */
  readonly destination: string;
  /** The outbox key: a key's messages go out one after the other, in input order. */
  readonly key: string | null;
  /** Its size as the batch limit counts it. */
  readonly bytes: number;
  /** The request entry, less its `Id` (the sender numbers the entries of each call). */
  readonly entry: E;
}

/** What one batch call answered: the ids taken, and the entries refused. */
export interface AwsBatchAnswer {
  readonly successful: readonly string[];
  readonly failed: readonly AwsBatchEntryFailure[];
}

/** Sends one batch (at most ten entries, one destination); rejects when the call fails. */
export type AwsBatchCall<E> = (
  destination: string,
  entries: readonly (E & { Id: string })[],
  signal: AbortSignal,
) => Promise<AwsBatchAnswer>;

/** One `send()`: where its outcomes go, its signal, and its one log of refused credentials. */
interface SendRound {
  readonly outcomes: PublishOutcomes;
  readonly signal: AbortSignal;
  /** Logs, once per send, that the credentials were refused. */
  credentialsRefused(error: unknown): void;
}

export interface AwsBatchSenderOptions {
  /** `SQS` or `SNS`, for messages. */
  readonly service: string;
  /** What a destination is called in messages (`queue`, `topic`). */
  readonly destinationNoun: string;
  readonly maxConcurrentRequests: number;
  /** Most bytes one call may carry, all entries together. */
  readonly maxBatchBytes: number;
  readonly logger: Logger;
}

/**
 * Publishes a batch of messages with the batch APIs: at most ten entries and `maxBatchBytes`
 * per call, one destination per call, calls in parallel up to `maxConcurrentRequests`. One
 * outcome per entry: what AWS took is published; an entry refused as the sender's fault fails
 * permanently, any other refusal is retried.
 *
 * A key's messages go out in input order, one at a time: the batch is sent in waves, the first
 * message of every key (and every message without a key) in the first, the second in the next,
 * and a key whose message failed sends nothing more (its later messages go back unsent). A FIFO
 * queue orders a message group across calls only as the calls arrive, so two calls in flight
 * for one key could swap it.
 *
 * A whole call refused for its content is sent again in halves until the entry at fault is
 * found: only it fails. A call that cannot reach AWS (refused connection, throttling, a server
 * fault) is an outage: its messages fail with `PublisherUnavailableError`, and `sent: false`
 * where AWS certainly did not take them. Refused credentials are an outage too, logged as an
 * error on every publish: an operator must act, and no message should lose attempts meanwhile.
 *
 * Aborted by the publish deadline, every call in flight is cancelled at once. Aborted for
 * another reason (the batch's hold was lost, the app is stopping), nothing more is sent and a
 * call already sent is cancelled only if AWS has not answered within ABORT_CONFIRM_GRACE_MS:
 * the entries its answer reports taken are published, not sent again later as copies.
 */
export class AwsBatchSender<E> {
  private readonly limit: ConcurrencyLimit;

  constructor(
    private readonly call: AwsBatchCall<E>,
    private readonly options: AwsBatchSenderOptions,
  ) {
    this.limit = new ConcurrencyLimit(options.maxConcurrentRequests);
  }

  /** Fills `outcomes` (by item index) for every item. */
  async send(
    items: readonly AwsBatchItem<E>[],
    outcomes: PublishOutcomes,
    signal: AbortSignal,
  ): Promise<void> {
    const stopped = new Set<string>();
    let credentialsLogged = false;
    const round: SendRound = {
      outcomes,
      signal,
      credentialsRefused: (error) => {
        if (credentialsLogged) return;
        credentialsLogged = true;
        this.options.logger.error(awsCredentialsRefused(this.options.service, error));
      },
    };
    for (const wave of waves(items)) {
      const sendable: AwsBatchItem<E>[] = [];
      for (const item of wave) {
        if (item.key !== null && stopped.has(item.key)) {
          outcomes[item.index] = {
            ok: false,
            error: new PublisherUnavailableError(
              `Not sent: an earlier message of key "${item.key}" in this batch was not published`,
            ),
            sent: false,
          };
        } else sendable.push(item);
      }
      await Promise.all(
        chunks(sendable, this.options.maxBatchBytes).map((chunk) =>
          this.limit
            .run(() => this.sendChunk(chunk, round, 0), signal)
            // Aborted while waiting for a request slot: never sent.
            .catch((error: unknown) =>
              signal.aborted
                ? failUnanswered(chunk, outcomes, abortReason(signal), false)
                : failUnanswered(chunk, outcomes, error),
            ),
        ),
      );
      for (const item of sendable) {
        if (item.key !== null && outcomes[item.index]?.ok !== true) stopped.add(item.key);
      }
    }
  }

  /** Sends one call's chunk (`depth` halvings into a refused one). */
  private async sendChunk(
    chunk: readonly AwsBatchItem<E>[],
    round: SendRound,
    depth: number,
  ): Promise<void> {
    const { outcomes, signal } = round;
    if (pastPublishDeadline(signal)) {
      failUnanswered(chunk, outcomes, abortReason(signal), false);
      return;
    }
    const destination = (chunk[0] as AwsBatchItem<E>).destination;
    const byId = new Map(chunk.map((item) => [String(item.index), item]));
    const entries = chunk.map((item) => ({ ...item.entry, Id: String(item.index) }));
    let answer: AwsBatchAnswer;
    try {
      // An abort for a lost hold or a stop leaves a call already sent a grace for its answer:
      // AWS may have taken its entries, and those it answers as taken count as delivered
      // instead of being sent again as copies. The deadline's abort still cancels it at once.
      answer = await cancelledAfterGrace(
        (requestSignal) => this.call(destination, entries, requestSignal),
        signal,
      );
    } catch (error) {
      return this.failed(chunk, round, depth, error);
    }
    for (const id of answer.successful) {
      const item = byId.get(id);
      if (item !== undefined) outcomes[item.index] = { ok: true };
    }
    for (const failure of answer.failed) {
      const item = byId.get(failure.Id ?? '');
      if (item !== undefined) outcomes[item.index] = this.entryOutcome(failure, destination);
    }
    for (const item of chunk) {
      outcomes[item.index] ??= {
        ok: false,
        error: new Error(
          `${this.options.service} answered the batch without an outcome for this message`,
        ),
      };
    }
  }

  /** Fails, or sends again in halves, a chunk whose call failed with `error`. */
  private async failed(
    chunk: readonly AwsBatchItem<E>[],
    round: SendRound,
    depth: number,
    error: unknown,
  ): Promise<void> {
    const { outcomes, signal } = round;
    const { service, destinationNoun } = this.options;
    const destination = (chunk[0] as AwsBatchItem<E>).destination;
    if (signal.aborted) {
      // The request may have reached AWS: each message counts an attempt.
      failUnanswered(chunk, outcomes, abortReason(signal));
      return;
    }
    switch (classifyAwsError(error)) {
      case 'unsent':
        failUnanswered(chunk, outcomes, awsUnreachable(service, error), false);
        return;
      case 'outage':
        failUnanswered(chunk, outcomes, awsUnreachable(service, error));
        return;
      case 'credentials':
        round.credentialsRefused(error);
        failUnanswered(chunk, outcomes, awsUnreachable(service, error), false);
        return;
      case 'destination':
        failUnanswered(
          chunk,
          outcomes,
          toPermanent(error, `${service} ${destinationNoun} ${destination} does not exist`),
        );
        return;
      case 'request': {
        if (chunk.length === 1) {
          failUnanswered(
            chunk,
            outcomes,
            toPermanent(error, `${service} refused the message for ${destination}`),
          );
          return;
        }
        if (depth === 0) {
          this.options.logger.warn(
            `${service} refused a batch of ${chunk.length} messages for ${destination} as a whole (${describeError(error)}); sending it in parts to find the message(s) at fault`,
          );
        }
        // Every key is in a chunk once, so the halves may go out side by side. A refused call
        // took none of its entries, so nothing is sent twice.
        const half = Math.ceil(chunk.length / 2);
        await Promise.all([
          this.sendChunk(chunk.slice(0, half), round, depth + 1),
          this.sendChunk(chunk.slice(half), round, depth + 1),
        ]);
        return;
      }
      case 'aborted':
        failUnanswered(chunk, outcomes, abortReason(signal));
        return;
      case 'other':
        failUnanswered(chunk, outcomes, error);
        return;
    }
  }

  private entryOutcome(failure: AwsBatchEntryFailure, destination: string): PublishOutcome {
    const { service } = this.options;
    const what = `${failure.Code ?? 'unknown'}: ${failure.Message ?? 'no message'}`;
    if (isPermanentEntryFailure(failure)) {
      return {
        ok: false,
        error: new PermanentPublishError(
          `${service} refused the message for ${destination} (${what})`,
        ),
      };
    }
    if (classifyAwsError({ name: failure.Code }) === 'outage') {
      // Throttled or failed on AWS's side before it was taken: no attempt counted.
      return {
        ok: false,
        error: new PublisherUnavailableError(
          `${service} could not take the message for ${destination} now (${what})`,
        ),
        sent: false,
      };
    }
    return {
      ok: false,
      error: new Error(`${service} did not take the message for ${destination} (${what})`),
    };
  }
}

/** The outage of a call that could not reach the service. */
export function awsUnreachable(service: string, error: unknown): PublisherUnavailableError {
  return new PublisherUnavailableError(`${service} is unreachable: ${describeError(error)}`, {
    cause: error,
  });
}

/** What is logged as an error when the service refuses the credentials: an operator must act. */
export function awsCredentialsRefused(service: string, error: unknown): string {
  return `${service} refused the credentials or a permission (${describeError(error)}): nothing is published and no message counts an attempt until this is fixed`;
}

/** How an aborted publish's messages end their message. */
export const AWS_ABORTED = 'before AWS answered';

/** The abort reason as the outcome of unanswered messages (the dispatcher aborts with a PublishTimeoutError). */
export function abortReason(signal: AbortSignal): Error {
  return abortedBy(signal, AWS_ABORTED);
}

/**
 * The items in waves: wave n holds the n-th message of every key (and, in the first, every
 * message without a key), each wave in input order.
 */
export function waves<T extends { readonly key: string | null }>(items: readonly T[]): T[][] {
  const seen = new Map<string, number>();
  const out: T[][] = [];
  for (const item of items) {
    let wave = 0;
    if (item.key !== null) {
      wave = seen.get(item.key) ?? 0;
      seen.set(item.key, wave + 1);
    }
    (out[wave] ??= []).push(item);
  }
  return out;
}

/**
 * The items of one wave in calls: one destination each, at most ten entries and `maxBytes`
 * together, in input order within a destination.
 */
export function chunks<T extends { readonly destination: string; readonly bytes: number }>(
  items: readonly T[],
  maxBytes: number,
): T[][] {
  const open = new Map<string, { items: T[]; bytes: number }>();
  const out: T[][] = [];
  for (const item of items) {
    let current = open.get(item.destination);
    if (
      current === undefined ||
      current.items.length >= AWS_MAX_BATCH_ENTRIES ||
      current.bytes + item.bytes > maxBytes
    ) {
      current = { items: [], bytes: 0 };
      open.set(item.destination, current);
      out.push(current.items);
    }
    current.items.push(item);
    current.bytes += item.bytes;
  }
  return out;
}
