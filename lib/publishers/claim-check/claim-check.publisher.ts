import { OutboxClaimCheckError } from '../../errors/outbox-claim-check.error';
import { ConcurrencyLimit } from '../../internal/concurrency-limit';
import { describeError } from '../../internal/describe-error';
import type { JsonOutboxRecord, OutboxRecord } from '../../message/outbox-record.interface';
import { OUTBOX_HEADER_CLAIM_CHECK, OUTBOX_HEADER_CLAIM_CHECK_ID } from '../../outbox.constants';
import type {
  OutboxMessageDraft,
  OutboxPublisher,
  PublisherRefusal,
  PublishOutcome,
} from '../outbox-publisher.interface';
import { abortReason, unsent } from '../kit/publish-abort';
import type {
  ClaimCheckEntry,
  ClaimCheckLedgerSlot,
  ClaimCheckState,
} from './claim-check-ledger.port';
import { claimCheckBody, TABLE_LOCATION_PREFIX } from './claim-check-reference';
import type { ClaimCheckStore } from './claim-check-store.interface';

/** Payload writes of one publish at once. */
const PUT_CONCURRENCY = 16;
const JSON_CONTENT_TYPE = 'application/json';

/** A payload of a record sent by reference, as the claim check stores it. */
interface Checked {
  readonly index: number;
  readonly blobId: string;
  readonly bytes: Buffer;
  readonly contentType: string;
}

function blobIdOf(record: OutboxRecord | OutboxMessageDraft): string | undefined {
  return record.headers[OUTBOX_HEADER_CLAIM_CHECK_ID];
}

/**
 * The claim check at the publisher (docs/claim-check.md): a message enqueued over its threshold
 * (marked at enqueue with `x-outbox-claim-check-id`) has its payload written to the store first,
 * recorded in `<table>_claim_checks` under its blob id, and is then handed to the broker's
 * publisher with a reference instead of the payload. A retry or a re-drive copy finds the
 * payload recorded as stored and writes nothing; messages without the mark pass through as they
 * are. A message whose payload could not be stored fails alone (and is retried like a failed
 * publish); the others of the batch go on.
 */
export class ClaimCheckPublisher implements OutboxPublisher {
  private readonly puts = new ConcurrencyLimit(PUT_CONCURRENCY);
  /** The broker publisher's health check, when it has one. */
  readonly ping?: (signal: AbortSignal) => Promise<void>;
  /** The broker publisher's check at enqueue, of the reference it will send, when it has one. */
  readonly checkEnqueue?: (message: OutboxMessageDraft) => PublisherRefusal | undefined;

  constructor(
    private readonly inner: OutboxPublisher,
    private readonly store: ClaimCheckStore,
    private readonly ledger: ClaimCheckLedgerSlot,
  ) {
    const ping = inner.ping?.bind(inner);
    if (ping !== undefined) this.ping = ping;
    const check = inner.checkEnqueue?.bind(inner);
    if (check !== undefined) this.checkEnqueue = (message) => this.checkReference(message, check);
  }

  async publish(
    records: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    const checked: Checked[] = [];
    records.forEach((record, index) => {
      const blobId = blobIdOf(record);
      if (blobId === undefined) return;
      checked.push(
        record.encoding === 'binary'
          ? { index, blobId, bytes: record.payload, contentType: record.contentType }
          : {
              index,
              blobId,
              bytes: Buffer.from(record.payload, 'utf8'),
              contentType: JSON_CONTENT_TYPE,
            },
      );
    });
    if (checked.length === 0) return this.inner.publish(records, signal);
    const outcomes = new Array<PublishOutcome | undefined>(records.length).fill(undefined);
    const sent: OutboxRecord[] = [...records];
    const locations = await this.storePayloads(records, checked, outcomes, signal);
    for (const item of checked) {
      const location = locations.get(item.blobId);
      const record = records[item.index];
      if (location === undefined || record === undefined || outcomes[item.index] !== undefined) {
        continue;
      }
      sent[item.index] = referenceRecord(record, item, location);
    }
    const forward = sent.flatMap((record, index) =>
      outcomes[index] === undefined ? [{ record, index }] : [],
    );
    if (forward.length > 0) {
      const answers = await this.inner.publish(
        forward.map((f) => f.record),
        signal,
      );
      forward.forEach((f, i) => (outcomes[f.index] = answers[i]));
    }
    return outcomes.map(
      (o) => o ?? { ok: false, error: new OutboxClaimCheckError('No outcome', undefined) },
    );
  }

  /**
   * Records the payloads and writes those not stored yet; answers the location of each blob id
   * stored, and fills in the outcome of every record whose payload could not be.
   */
  private async storePayloads(
    records: readonly OutboxRecord[],
    checked: readonly Checked[],
    outcomes: (PublishOutcome | undefined)[],
    signal: AbortSignal,
  ): Promise<Map<string, string>> {
    const fail = (blobIds: ReadonlySet<string>, outcome: PublishOutcome): void => {
      for (const item of checked) if (blobIds.has(item.blobId)) outcomes[item.index] ??= outcome;
    };
    // One entry per payload: a batch may hold a message and its re-drive copies.
    const entries = new Map<string, ClaimCheckEntry>();
    for (const item of checked) {
      const location = this.store.locationFor(item.blobId);
      entries.set(item.blobId, {
        blobId: item.blobId,
        messageId: records[item.index]?.messageId ?? item.blobId,
        location: location ?? `${TABLE_LOCATION_PREFIX}${item.blobId}`,
        contentType: item.contentType,
        size: item.bytes.length,
        payload: location === null ? item.bytes : null,
      });
    }
    const all = new Set(entries.keys());
    let states: ClaimCheckState[];
    const ledger = await this.ledger.get();
    try {
      states = await ledger.record([...entries.values()]);
    } catch (error) {
      fail(all, {
        ok: false,
        error: new OutboxClaimCheckError(
          `The claim check could not record the payloads in its table: ${describeError(error)}`,
          undefined,
          { cause: error },
        ),
      });
      return new Map();
    }
    const bytesOf = new Map(checked.map((item) => [item.blobId, item]));
    const located = new Map<string, string>();
    const written: string[] = [];
    await Promise.all(
      states.map(async (state) => {
        const item = bytesOf.get(state.blobId);
        if (item === undefined) return;
        if (state.stored) {
          located.set(state.blobId, state.location);
          return;
        }
        try {
          if (this.store.put === undefined) {
            throw new Error(`the ${this.store.kind} store cannot write payloads (it has no put)`);
          }
          const put = this.store.put.bind(this.store);
          await this.puts.run(
            () => put(state.location, { bytes: item.bytes, contentType: item.contentType }, signal),
            signal,
          );
          located.set(state.blobId, state.location);
          written.push(state.blobId);
        } catch (error) {
          fail(
            new Set([state.blobId]),
            signal.aborted
              ? unsent(abortReason(signal, 'before the claim check stored the payload'))
              : {
                  ok: false,
                  error: new OutboxClaimCheckError(
                    `The claim check could not write the payload to ${state.location}: ${describeError(error)}`,
                    state.location,
                    { cause: error },
                  ),
                },
          );
        }
      }),
    );
    // A row the store lost (deleted by hand) is recorded again by the next publish of it.
    fail(new Set([...all].filter((id) => !located.has(id))), {
      ok: false,
      error: new OutboxClaimCheckError('The claim check found no record of the payload', undefined),
    });
    if (written.length > 0) {
      // The payloads are written: if marking them fails, a later send writes them once more
      // (the store keeps one copy at one location), which is no reason to hold these back.
      await ledger.markStored(written).catch(() => undefined);
    }
    return located;
  }

  private checkReference(
    message: OutboxMessageDraft,
    check: (message: OutboxMessageDraft) => PublisherRefusal | undefined,
  ): PublisherRefusal | undefined {
    const blobId = blobIdOf(message);
    if (blobId === undefined) return check(message);
    // What the broker will get: the reference, at a location of the store's making.
    const location = this.store.locationFor(blobId) ?? `${TABLE_LOCATION_PREFIX}${blobId}`;
    const size =
      typeof message.payload === 'string'
        ? Buffer.byteLength(message.payload)
        : message.payload.length;
    const { contentType: _contentType, ...rest } = message;
    return check({
      ...rest,
      payload: claimCheckBody({ location, blobId }, size, message.contentType ?? JSON_CONTENT_TYPE),
      headers: { ...message.headers, [OUTBOX_HEADER_CLAIM_CHECK]: location },
    });
  }

  async close(): Promise<void> {
    try {
      await this.inner.close?.();
    } finally {
      await this.store.close?.();
    }
  }
}

/** The record the broker's publisher sends instead: the reference as a JSON payload. */
function referenceRecord(record: OutboxRecord, item: Checked, location: string): JsonOutboxRecord {
  const { contentType: _contentType, encoding: _encoding, payload: _payload, ...rest } = record;
  return {
    ...rest,
    payload: claimCheckBody({ location, blobId: item.blobId }, item.bytes.length, item.contentType),
    headers: { ...record.headers, [OUTBOX_HEADER_CLAIM_CHECK]: location },
  };
}
