// nestjs-outbox/microservices: publishing through @nestjs/microservices clients.
export {
  ClientProxyPublisher,
  type ClientProxyPublisherOptions,
  type OutboxEnvelope,
} from './client-proxy.publisher';
