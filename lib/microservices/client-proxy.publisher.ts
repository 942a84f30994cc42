import {
  ClientKafka,
  ClientMqtt,
  ClientRMQ,
  MqttRecordBuilder,
  RmqRecordBuilder,
  type ClientProxy,
} from '@nestjs/microservices';
import { lastValueFrom, timeout as rxTimeout, TimeoutError } from 'rxjs';
import { PublishTimeoutError } from '../errors/publish-timeout.error';
import { PublisherUnavailableError } from '../errors/publisher-unavailable.error';
import type { OutboxPublisher, PublishOutcome } from '../interfaces/outbox-publisher.interface';
import type { OutboxRecord } from '../interfaces/outbox-record.interface';
import { OUTBOX_HEADER_MESSAGE_ID, OUTBOX_HEADER_TYPE } from '../outbox.constants';

/** The envelope sent on transports without message headers (TCP, Redis, NATS by default). */
export interface OutboxEnvelope<TPayload = unknown> {
  readonly messageId: string;
  readonly type: string;
  readonly key: string | null;
  readonly headers: Readonly<Record<string, string>>;
  readonly payload: TPayload;
}

export interface ClientProxyPublisherOptions {
  /** How long one `emit` may wait for the transport's acknowledgement. @default 5000 */
  timeoutMs?: number;
  /** The event pattern a message is emitted under. @default the message's topic */
  pattern?: (record: OutboxRecord) => string;
  /** Builds the emitted data; overrides the per-transport default. */
  toData?: (record: OutboxRecord) => unknown;
  /** Also close the client when the module shuts down. @default false (the client is yours) */
  closeClient?: boolean;
}

// Error codes and texts of a transport that cannot reach its broker at all.
const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', 'ETIMEDOUT', 'ENETUNREACH', 'CONNECTION_REFUSED']);
const CONNECTION_TEXT = /ECONNREFUSED|ECONNRESET|connection (closed|refused|lost|is closed)|socket (closed|hang up)|not connected|disconnected|broker.*(not available|unavailable)|Connection is closed/i;

function isConnectionError(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return typeof error === 'string' && CONNECTION_TEXT.test(error);
  const { code, message } = error as { code?: unknown; message?: unknown };
  return (typeof code === 'string' && CONNECTION_CODES.has(code)) || (typeof message === 'string' && CONNECTION_TEXT.test(message));
}

/**
 * Publishes through any `@nestjs/microservices` client with `emit()`, awaiting each emit's
 * observable under a timeout so that an error or a silent transport is never taken for success.
 * Kafka gets a record (key, value, headers), RabbitMQ a persistent message with id and type, MQTT a
 * QoS 1 message with user properties, and the other transports an {@link OutboxEnvelope}.
 */
export class ClientProxyPublisher implements OutboxPublisher {
  private readonly timeoutMs: number;
  private readonly toData: (record: OutboxRecord) => unknown;
  private readonly pattern: (record: OutboxRecord) => string;

  constructor(
    private readonly client: ClientProxy,
    private readonly options: ClientProxyPublisherOptions = {},
  ) {
    this.timeoutMs = options.timeoutMs ?? 5_000;
    this.pattern = options.pattern ?? ((record) => record.topic);
    this.toData = options.toData ?? this.defaultData(client);
  }

  async publish(records: readonly OutboxRecord[], signal: AbortSignal): Promise<PublishOutcome[]> {
    try {
      await this.client.connect();
    } catch (error) {
      throw new PublisherUnavailableError('The microservices client could not connect', { cause: error });
    }
    const aborted = new Promise<never>((_, reject) => {
      if (signal.aborted) reject(signal.reason);
      signal.addEventListener('abort', () => reject(signal.reason), { once: true });
    });
    aborted.catch(() => undefined);
    return Promise.all(records.map((record) => this.publishOne(record, aborted)));
  }

  async close(): Promise<void> {
    if (this.options.closeClient === true) await this.client.close();
  }

  private async publishOne(record: OutboxRecord, aborted: Promise<never>): Promise<PublishOutcome> {
    try {
      const emitted = this.client.emit(this.pattern(record), this.toData(record)).pipe(rxTimeout(this.timeoutMs));
      await Promise.race([lastValueFrom(emitted, { defaultValue: undefined }), aborted]);
      return { ok: true };
    } catch (error) {
      if (error instanceof TimeoutError) return { ok: false, error: new PublishTimeoutError(this.timeoutMs) };
      if (isConnectionError(error)) {
        return { ok: false, error: new PublisherUnavailableError('The transport lost its connection', { cause: error }) };
      }
      return { ok: false, error };
    }
  }

  private defaultData(client: ClientProxy): (record: OutboxRecord) => unknown {
    if (client instanceof ClientKafka) {
      return (r) => ({
        key: r.key,
        // The JSON text as is: Nest's Kafka deserializer parses it on the consumer side.
        value: r.payload,
        headers: { ...r.headers, [OUTBOX_HEADER_MESSAGE_ID]: r.messageId, [OUTBOX_HEADER_TYPE]: r.type },
      });
    }
    if (client instanceof ClientRMQ) {
      return (r) =>
        new RmqRecordBuilder(JSON.parse(r.payload) as unknown)
          .setOptions({
            // ClientRMQ sends transient messages unless told otherwise; a broker restart would lose them.
            persistent: true,
            messageId: r.messageId,
            type: r.type,
            contentType: 'application/json',
            timestamp: r.createdAt.getTime(),
            headers: { ...r.headers, [OUTBOX_HEADER_MESSAGE_ID]: r.messageId, [OUTBOX_HEADER_TYPE]: r.type },
          })
          .build();
    }
    if (client instanceof ClientMqtt) {
      return (r) =>
        new MqttRecordBuilder(this.envelope(r))
          .setQoS(1)
          .setProperties({ userProperties: { ...r.headers, [OUTBOX_HEADER_MESSAGE_ID]: r.messageId, [OUTBOX_HEADER_TYPE]: r.type } })
          .build();
    }
    return (r) => this.envelope(r);
  }

  private envelope(r: OutboxRecord): OutboxEnvelope {
    return { messageId: r.messageId, type: r.type, key: r.key, headers: r.headers, payload: JSON.parse(r.payload) as unknown };
  }
}
