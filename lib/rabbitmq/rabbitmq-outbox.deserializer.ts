/** What a Nest RMQ server hands its deserializer with a message (the AMQP properties). */
export interface RabbitMqMessageProperties {
  readonly type?: unknown;
}

/** An incoming event as Nest's microservice servers route it. */
export interface RabbitMqOutboxIncomingEvent {
  readonly pattern: string | undefined;
  readonly data: unknown;
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
 * Structurally a Nest `ConsumerDeserializer`, so this subpath needs no `@nestjs/microservices`.
 */
export class RabbitMqOutboxDeserializer {
  deserialize(value: unknown, properties?: RabbitMqMessageProperties): RabbitMqOutboxIncomingEvent {
    return {
      pattern: typeof properties?.type === 'string' ? properties.type : undefined,
      data: value,
    };
  }
}
