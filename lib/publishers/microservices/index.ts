// nestjs-outbox/microservices: publishing through @nestjs/microservices clients.
export {
  ClientProxyPublisher,
  type ClientProxyPublisherOptions,
  type OutboxClientProxy,
  type OutboxEnvelope,
} from './client-proxy.publisher';
/** The message's `attributes.mqtt` (docs/broker-attributes.md). */
export type { OutboxMqttAttributes } from '../../message/outbox-message.interface';
