import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { OutboxHandlerBusyError } from '../../errors/outbox-handler-busy.error';
import { OutboxHandlerMissingError } from '../../errors/outbox-handler-missing.error';
import { PermanentPublishError } from '../../errors/permanent-publish.error';
import { ConcurrencyLimit } from '../../internal/concurrency-limit';
import { describeError } from '../../internal/describe-error';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import { OUTBOX_HANDLERS_OPTIONS, OUTBOX_HEADER_TENANT } from '../../outbox.constants';
import type { OutboxPublisher, PublishOutcome } from '../outbox-publisher.interface';
import { pastPublishDeadline } from '../publish-deadline';
import { LocalMessages } from './local.messages';
import type { OutboxHandlerMessage } from './outbox-handler-message.interface';
import { OutboxHandlersExplorer, type OutboxHandlerBinding } from './outbox-handlers.explorer';
import type { ResolvedOutboxHandlersOptions } from './outbox-handlers.options';

/**
 * Delivers outbox messages in-process, to the app's `@OnOutboxMessage()` handlers: the outbox's
 * publisher for a modular monolith, alone or behind `routePublishers()` beside a broker.
 *
 * A message is delivered once every handler of it (its topic, and its type where a handler names
 * one) resolved. A handler that throws fails the delivery: the dispatcher retries it with its
 * backoff and dead-letters it after `retry.maxAttempts`, at once for a `PermanentPublishError`.
 * A message no handler takes is dead-lettered (`OutboxHandlerMissingError`), never counted as
 * delivered. Messages of one key are handed over one at a time, in claim order; other keys run
 * concurrently up to `concurrency`. A handler call that outlives its publish (past
 * `publishTimeoutMs`) still holds its key: until it returns, the key's messages, and that message
 * again, go back unsent with no attempt counted. Provided by `OutboxHandlersModule`.
 */
@Injectable()
export class LocalPublisher implements OutboxPublisher, OnModuleInit {
  private readonly logger = new Logger(LocalPublisher.name);
  private readonly limit: ConcurrencyLimit;
  private readonly tenantContext: ResolvedOutboxHandlersOptions['tenantContext'];
  private byTopic = new Map<string, readonly OutboxHandlerBinding[]>();
  /** The handler calls in progress, by lane (see laneOf), across publishes. */
  private readonly running = new Map<string, RunningCall>();

  constructor(
    private readonly explorer: OutboxHandlersExplorer,
    @Inject(OUTBOX_HANDLERS_OPTIONS) options: ResolvedOutboxHandlersOptions,
  ) {
    this.limit = new ConcurrencyLimit(options.concurrency);
    this.tenantContext = options.tenantContext;
  }

  /** Finds the handlers: every provider exists by now, and no dispatcher started yet. */
  onModuleInit(): void {
    const byTopic = new Map<string, OutboxHandlerBinding[]>();
    for (const binding of this.explorer.explore()) {
      const list = byTopic.get(binding.topic) ?? [];
      list.push(binding);
      byTopic.set(binding.topic, list);
    }
    this.byTopic = byTopic;
    if (byTopic.size === 0) {
      this.logger.warn(LocalMessages.noHandlersFound());
      return;
    }
    const list = [...byTopic]
      .map(([topic, bindings]) => `${topic} → ${bindings.map(describeBinding).join(', ')}`)
      .join('; ');
    this.logger.log(LocalMessages.handlersFound(list));
  }

  /** The topics that have at least one handler in this app. */
  topics(): string[] {
    return [...this.byTopic.keys()];
  }

  /** True when a handler of this app takes messages of `topic` (of any type). */
  handles(topic: string): boolean {
    return this.byTopic.has(topic);
  }

  async publish(
    messages: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    const outcomes: PublishOutcome[] = new Array<PublishOutcome>(messages.length);
    // One lane per key (each message without a key is a lane of its own): a key's messages run
    // one after another in claim order, the lanes side by side. With ordering on the dispatcher
    // hands over one message per key per call anyway (runs go out in rounds); this keeps a key
    // sequential when it is off.
    const lanes = new Map<string, number[]>();
    messages.forEach((record, i) => {
      const lane = record.key === null ? `#${i}` : `k:${record.key}`;
      const list = lanes.get(lane) ?? [];
      list.push(i);
      lanes.set(lane, list);
    });
    await Promise.all(
      [...lanes.values()].map(async (indexes) => {
        for (const i of indexes) {
          const record = messages[i] as OutboxRecord;
          outcomes[i] = await this.deliverOne(record, signal);
        }
      }),
    );
    return outcomes;
  }

  private async deliverOne(record: OutboxRecord, signal: AbortSignal): Promise<PublishOutcome> {
    const handlers = this.handlersOf(record);
    if (!Array.isArray(handlers)) return { ok: false, error: handlers };
    // A call the dispatcher gave up on (past its publish timeout) may still be running: the key
    // must not move on, nor the message run twice at once, before it returns.
    const lane = laneOf(record);
    const busy = this.running.get(lane);
    if (busy !== undefined) return this.heldBack(record, busy);
    const call: RunningCall = {
      messageId: record.messageId,
      handlers: handlers.map(describeBinding).join(', '),
      since: performance.now(),
      warned: new Set(),
    };
    this.running.set(lane, call);
    let started = false;
    try {
      await this.limit.run(async () => {
        // Past the deadline (e.g. woken from a pause), the lease may be gone: hand nothing over.
        if (pastPublishDeadline(signal)) throw abortReason(signal);
        started = true;
        await this.runHandlers(record, handlers, signal);
      }, signal);
      return { ok: true };
    } catch (error) {
      // Aborted while waiting for a free slot, or past the deadline: no handler saw the message.
      return started ? { ok: false, error } : { ok: false, error, sent: false };
    } finally {
      this.running.delete(lane);
    }
  }

  /** The outcome of a message held back by a call of its lane, warned about once per call. */
  private heldBack(record: OutboxRecord, busy: RunningCall): PublishOutcome {
    if (!busy.warned.has(record.messageId)) {
      busy.warned.add(record.messageId);
      this.logger.warn(
        LocalMessages.stillRunning(
          busy.handlers,
          busy.messageId,
          Math.round(performance.now() - busy.since),
          record.messageId,
        ),
      );
    }
    return {
      ok: false,
      error: new OutboxHandlerBusyError(
        LocalMessages.heldBack(busy.handlers, busy.messageId),
        busy.messageId,
      ),
      sent: false,
    };
  }

  /** The handlers of a message, or why it has none. */
  private handlersOf(record: OutboxRecord): readonly OutboxHandlerBinding[] | Error {
    const ofTopic = this.byTopic.get(record.topic);
    if (ofTopic === undefined) {
      return new OutboxHandlerMissingError(
        LocalMessages.noHandler(record.topic),
        record.topic,
        record.type,
      );
    }
    const handlers = ofTopic.filter((h) => h.type === undefined || h.type === record.type);
    if (handlers.length === 0) {
      return new OutboxHandlerMissingError(
        LocalMessages.noHandlerForType(record.topic, record.type),
        record.topic,
        record.type,
      );
    }
    try {
      if (record.encoding !== 'binary') JSON.parse(record.payload);
    } catch (error) {
      return new PermanentPublishError(
        LocalMessages.notJson(record.messageId, describeError(error)),
      );
    }
    return handlers;
  }

  /**
   * Runs every handler of the message side by side; resolves when all resolved, else rejects
   * with the first failure, a permanent one first (retrying cannot help that handler).
   */
  private async runHandlers(
    record: OutboxRecord,
    handlers: readonly OutboxHandlerBinding[],
    signal: AbortSignal,
  ): Promise<void> {
    const tenant = record.headers[OUTBOX_HEADER_TENANT];
    const context = this.tenantContext;
    const results = await Promise.allSettled(
      handlers.map(async (handler) => {
        const message = messageFor(record, signal, tenant);
        if (tenant === undefined || context === undefined) await handler.call(message);
        else
          await context(tenant, async () => {
            await handler.call(message);
          });
      }),
    );
    const failures = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
    if (failures.length === 0) return;
    throw failures.find((e) => e instanceof PermanentPublishError) ?? failures[0];
  }
}

/** A handler call in progress: what runs, since when, and who was told it holds its lane. */
interface RunningCall {
  readonly messageId: string;
  readonly handlers: string;
  readonly since: number;
  /** The messages held back by this call that were logged already: one warning each. */
  readonly warned: Set<string>;
}

function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason));
}

/** A key's messages share a lane; a message without a key is a lane of its own. */
function laneOf(record: OutboxRecord): string {
  return record.key === null ? `m:${record.messageId}` : `k:${record.key}`;
}

function describeBinding(binding: OutboxHandlerBinding): string {
  return binding.type === undefined ? binding.name : `${binding.name} (type ${binding.type})`;
}

/** A handler's own copy: one handler changing its payload must not change another's. */
function messageFor(
  record: OutboxRecord,
  signal: AbortSignal,
  tenant: string | undefined,
): OutboxHandlerMessage {
  // Bytes are copied too, once per handler, and the copy is also its raw payload: a handler
  // writing into its Buffer must not change another's.
  const bytes = record.encoding === 'binary' ? Buffer.from(record.payload) : undefined;
  return Object.freeze({
    messageId: record.messageId,
    topic: record.topic,
    key: record.key,
    type: record.type,
    payload: bytes ?? (JSON.parse(record.payload as string) as unknown),
    rawPayload: bytes ?? record.payload,
    ...(record.encoding === 'binary' ? { contentType: record.contentType } : {}),
    ...(tenant === undefined ? {} : { tenant }),
    headers: Object.freeze({ ...record.headers }),
    attempts: record.attempts,
    createdAt: record.createdAt,
    signal,
  });
}
