import {
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import type {
  OutboxMessageDraft,
  OutboxPublisher,
  PublisherRefusal,
  PublishOutcome,
} from '../../publishers/outbox-publisher.interface';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import { describeError } from '../../internal/describe-error';
import { OptionChecks } from '../../options/option-checks';

/** Options of {@link TracedPublisher}. */
export interface TracedPublisherOptions {
  /**
   * `messaging.system` of the spans, one of OpenTelemetry's well-known values where there is one:
   * `'kafka'`, `'rabbitmq'`, `'nats'`, `'redis'`… (required: the wrapper cannot tell the broker).
   */
  system: string;
  /** Tracer the spans are created with. @default trace.getTracer('nestjs-outbox') */
  tracer?: Tracer;
  /** `messaging.destination.name` of a message (and its span name). @default its topic */
  destination?: (record: OutboxRecord) => string;
  /** More span attributes for a message, e.g. a RabbitMQ routing key. @default none */
  attributes?: (record: OutboxRecord) => Attributes;
}

const checks = new OptionChecks('TracedPublisher');
const OPTION_KEYS = {
  '': { system: true, tracer: true, destination: true, attributes: true },
} as const satisfies { '': Record<keyof TracedPublisherOptions, true> };

/**
 * Wraps any `OutboxPublisher` so that each message gets a PRODUCER span, and its consumers the
 * context of that span.
 *
 * The span is a **child of the context the message was enqueued in**, read back from the
 * message's `traceparent` / `tracestate` headers (see `traceContextHeaders`): the request that
 * enqueued the message, its publication and its consumption form one trace. A link would be the
 * choice for a span covering many messages; here each span covers one message, the case where
 * OpenTelemetry's messaging conventions allow the parent, and where trace viewers show the whole
 * path instead of a trace per publish. A retried message gets one span per attempt under the same
 * parent. The producer span's context then replaces the trace headers handed to the wrapped
 * publisher, so Kafka, RabbitMQ and Nest-transport consumers continue from it.
 *
 * Span name `send <destination>`, kind PRODUCER, attributes `messaging.system`,
 * `messaging.destination.name`, `messaging.operation.type` / `.name` (`send`),
 * `messaging.message.id` (and `messaging.kafka.message.key` for Kafka). A failed message ends its
 * span with status ERROR and the error recorded; `ok` only once the broker acknowledged it.
 */
export class TracedPublisher implements OutboxPublisher {
  /** Forwarded when the wrapped publisher has one, so health checks still see it. */
  readonly ping?: (signal: AbortSignal) => Promise<void>;
  /** Forwarded when the wrapped publisher has one, so enqueue still checks its limits. */
  readonly checkEnqueue?: (message: OutboxMessageDraft) => PublisherRefusal | undefined;
  private readonly tracer: Tracer;
  private readonly system: string;
  private readonly destination: (record: OutboxRecord) => string;
  private readonly attributes: ((record: OutboxRecord) => Attributes) | undefined;

  constructor(
    private readonly publisher: OutboxPublisher,
    options: TracedPublisherOptions,
  ) {
    if (typeof publisher?.publish !== 'function') {
      checks.fail('publisher', 'it has no publish() method', 'Wrap an OutboxPublisher.');
    }
    if (options === null || typeof options !== 'object') {
      checks.fail(
        'options',
        `${checks.show(options)} is not an object`,
        "Pass { system: 'kafka' }.",
      );
    }
    checks.knownKeys(options, OPTION_KEYS);
    if (typeof options.system !== 'string' || options.system === '') {
      checks.fail(
        'system',
        'it is missing: the wrapper cannot tell which broker the publisher talks to',
        "Pass the messaging.system of the spans, e.g. 'kafka', 'rabbitmq' or 'nats'.",
      );
    }
    for (const name of ['destination', 'attributes'] as const) {
      if (options[name] !== undefined && typeof options[name] !== 'function') {
        checks.fail(name, 'it is not a function', 'Pass (record) => … or leave it out.');
      }
    }
    this.system = options.system;
    this.tracer = options.tracer ?? trace.getTracer('nestjs-outbox');
    this.destination = options.destination ?? ((record) => record.topic);
    this.attributes = options.attributes;
    if (publisher.ping !== undefined) {
      this.ping = (signal) => publisher.ping?.(signal) ?? Promise.resolve();
    }
    if (publisher.checkEnqueue !== undefined) {
      this.checkEnqueue = (message) => publisher.checkEnqueue?.(message);
    }
  }

  async publish(
    messages: readonly OutboxRecord[],
    signal: AbortSignal,
  ): Promise<readonly PublishOutcome[]> {
    const spans = messages.map((record) => this.start(record));
    const open = new Set(spans.map(({ span }) => span));
    const end = (span: Span, outcome: PublishOutcome): void => {
      if (!open.delete(span)) return;
      if (!outcome.ok) failed(span, outcome.error);
      span.end();
    };
    // The dispatcher stops waiting at its deadline (or shutdown); end the spans then, with the
    // reason, rather than leave them open for a publisher that may never answer.
    const onAbort = (): void =>
      open.forEach((span) => end(span, { ok: false, error: signal.reason }));
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      const outcomes = await this.publisher.publish(
        spans.map(({ record }) => record),
        signal,
      );
      spans.forEach(({ span }, i) =>
        end(span, outcomes[i] ?? { ok: false, error: new Error('the publisher gave no outcome') }),
      );
      return outcomes;
    } catch (error) {
      spans.forEach(({ span }) => end(span, { ok: false, error }));
      throw error;
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }

  close(): Promise<void> {
    return this.publisher.close?.() ?? Promise.resolve();
  }

  /** Starts the span of one message and returns the message with the span's trace headers. */
  private start(record: OutboxRecord): { span: Span; record: OutboxRecord } {
    const enqueued = propagation.extract(ROOT_CONTEXT, record.headers);
    const destination = this.destination(record);
    const attributes: Attributes = {
      'messaging.system': this.system,
      'messaging.destination.name': destination,
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'send',
      'messaging.message.id': record.messageId,
    };
    if (this.system === 'kafka' && record.key !== null) {
      attributes['messaging.kafka.message.key'] = record.key;
    }
    if (this.attributes !== undefined) Object.assign(attributes, this.attributes(record));
    const span = this.tracer.startSpan(
      `send ${destination}`,
      { kind: SpanKind.PRODUCER, attributes },
      enqueued,
    );
    const headers: Record<string, string> = { ...record.headers };
    propagation.inject(trace.setSpan(enqueued, span), headers);
    // Object.assign: on Node 20 a spread with a property after it is many times slower.
    return { span, record: Object.assign({}, record, { headers }) };
  }
}

function failed(span: Span, error: unknown): void {
  if (error instanceof Error) span.recordException(error);
  span.setAttribute('error.type', error instanceof Error ? error.name : '_OTHER');
  span.setStatus({ code: SpanStatusCode.ERROR, message: describeError(error) });
}
