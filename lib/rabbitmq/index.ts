// nestjs-outbox/rabbitmq: a native RabbitMQ publisher on amqplib (an optional peer dependency).
export { RabbitMqPublisher } from './rabbitmq.publisher';
export {
  resolveRabbitMqPublisherOptions,
  type RabbitMqPublisherOptions,
  type ResolvedRabbitMqPublisherOptions,
} from './rabbitmq-publisher.options';
export { RabbitMqPublishError, type RabbitMqPublishFailure } from './rabbitmq-publish.error';
