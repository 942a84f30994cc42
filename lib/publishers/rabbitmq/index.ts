// nestjs-outbox/rabbitmq: a native RabbitMQ publisher on amqplib (an optional peer dependency).
export { RabbitMqPublisher } from './rabbitmq.publisher';
export {
  RABBITMQ_PUBLISH_ID_CORRELATION_PREFIX,
  RABBITMQ_PUBLISH_ID_HEADER,
} from './rabbitmq-publish-id';
export {
  resolveRabbitMqPublisherOptions,
  type RabbitMqPublisherOptions,
  type ResolvedRabbitMqPublisherOptions,
} from './rabbitmq-publisher.options';
export { RabbitMqPublishError, type RabbitMqPublishFailure } from './rabbitmq-publish.error';
export { RabbitMqAccessRefusedError, type RabbitMqRefusal } from './rabbitmq-access-refused.error';
export {
  RabbitMqOutboxDeserializer,
  type RabbitMqMessageProperties,
  type RabbitMqOutboxIncomingEvent,
} from './rabbitmq-outbox.deserializer';
/** The message's `attributes.rabbitmq` (docs/broker-attributes.md). */
export type { OutboxRabbitMqAttributes } from '../../message/outbox-message.interface';
