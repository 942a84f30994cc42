// nestjs-outbox/microservices: publishing through @nestjs/microservices clients.
export {
  ClientProxyPublisher,
  type ClientProxyPublisherOptions,
  type OutboxClientProxy,
  type OutboxEnvelope,
} from './client-proxy.publisher';
