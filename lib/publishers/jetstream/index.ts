// nestjs-outbox/jetstream: a native NATS JetStream publisher on @nats-io/jetstream and
// @nats-io/transport-node (optional peer dependencies).
export { JetStreamPublisher } from './jetstream.publisher';
export {
  resolveJetStreamPublisherOptions,
  type JetStreamPublisherOptions,
  type ResolvedJetStreamPublisherOptions,
} from './jetstream-publisher.options';
export {
  classifyJetStreamError,
  JETSTREAM_REFUSED_CODES,
  type JetStreamFailureKind,
} from './jetstream-error.classifier';
/** The message's `attributes.jetstream` (docs/broker-attributes.md). */
export type { OutboxJetStreamAttributes } from '../../message/outbox-message.interface';
