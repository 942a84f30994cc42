// nestjs-outbox/kafka: a native Kafka publisher on kafkajs (an optional peer dependency).
export { KafkaPublisher } from './kafka.publisher';
export {
  resolveKafkaPublisherOptions,
  type KafkaPublisherOptions,
  type KafkaPublisherProducerOptions,
  type ResolvedKafkaPublisherOptions,
} from './kafka-publisher.options';
export { classifyKafkaError, type KafkaFailureKind } from '../kafka-error.classifier';
/** The message's `attributes.kafka` (docs/broker-attributes.md). */
export type { OutboxKafkaAttributes } from '../../message/outbox-message.interface';
