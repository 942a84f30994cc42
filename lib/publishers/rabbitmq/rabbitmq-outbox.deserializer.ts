import { isStructuredCloudEvent } from '../cloud-events/received-cloud-event';
import { publishIdOf } from './rabbitmq-publish-id';

/** What a Nest RMQ server hands its deserializer with a message (the AMQP properties). */
export interface RabbitMqMessageProperties {
  readonly type?: unknown;
  readonly contentType?: unknown;
  readonly headers?: Readonly<Record<string, unknown>> | null;
  readonly correlationId?: unknown;
}

/** An incoming packet as Nest's microservice servers route it. */
export interface RabbitMqOutboxIncomingEvent {
  readonly pattern: unknown;
  readonly data: unknown;
  /** Present on a request of a Nest client (`send()`), which the server answers. */
  readonly id?: unknown;
}

/**
 * Lets a Nest RMQ microservice consume what `RabbitMqPublisher` sends. The publisher sends the
 * event itself as the body (so any AMQP consumer can read it), not Nest's `{ pattern, data }`
 * packet; this deserializer takes the pattern from the AMQP `type` property, which the
 * publisher sets to the event type, so `@EventPattern('order.created')` handlers receive it:
 *
 * ```ts
 * NestFactory.createMicroservice(AppModule, {
 *   transport: Transport.RMQ,
 *   options: { urls, queue: 'orders', noAck: false, deserializer: new RabbitMqOutboxDeserializer() },
 * });
 * ```
 *
 * Messages sent as CloudEvents (`RabbitMqPublisher`'s `cloudEvents` option) reach the handler
 * of their type too: in binary mode the body is the payload, as for a plain message; in
 * structured mode the handler gets the event's data (`data`, or the bytes of `data_base64` as a
 * `Buffer`), not the envelope. The event's attributes stay on the AMQP message (`@Ctx()
 * context.getMessage()`), where `messageIdFromRpcContext` and `sequenceOf` read them.
 *
 * Only messages that carry the publisher's `x-outbox-publish-id` header (or, sent with
 * `outboxHeaders: false`, its `x-outbox-publish:` correlation id) are read so. Everything
 * else on the queue (what a Nest `ClientRMQ` emits or sends, `ClientProxyPublisher` over RMQ
 * included) is Nest's own packet and passes as Nest's default deserializer passes it, so one
 * queue can serve both and `send()` requests keep their id and get their answer.
 *
 * Structurally a Nest `ConsumerDeserializer`, so this subpath needs no `@nestjs/microservices`.
 */
export class RabbitMqOutboxDeserializer {
  deserialize(value: unknown, properties?: RabbitMqMessageProperties): RabbitMqOutboxIncomingEvent {
    if (properties !== undefined && publishIdOf(properties) !== undefined) {
      return {
        pattern: typeof properties.type === 'string' ? properties.type : undefined,
        data: isStructuredCloudEvent(
          typeof properties.contentType === 'string' ? properties.contentType : undefined,
        )
          ? dataOfEvent(value)
          : value,
      };
    }
    return isNestPacket(value) ? value : { pattern: undefined, data: value };
  }
}

// As Nest's own IncomingRequestDeserializer tells its packets from external messages.
function isNestPacket(value: unknown): value is RabbitMqOutboxIncomingEvent {
  if (typeof value !== 'object' || value === null) return false;
  const packet = value as { pattern?: unknown; data?: unknown };
  return packet.pattern !== undefined || packet.data !== undefined;
}

/**
 * The data of a structured CloudEvent as Nest's RMQ server parsed the body (JSON): `data`, or
 * `data_base64` as bytes (none for an event without data); a body that is no event is handed
 * over as it is.
 */
function dataOfEvent(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value;
  const event = value as { specversion?: unknown; data?: unknown; data_base64?: unknown };
  if (typeof event.specversion !== 'string') return value;
  if (typeof event.data_base64 === 'string') return Buffer.from(event.data_base64, 'base64');
  return event.data;
}
