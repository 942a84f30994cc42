// nestjs-outbox/redis-streams: a native Redis Streams publisher on ioredis (an optional peer dependency).
export { RedisStreamsPublisher, REDIS_STREAM_PAYLOAD_FIELD } from './redis-streams.publisher';
export {
  resolveRedisStreamsPublisherOptions,
  type RedisStreamsPublisherOptions,
  type RedisStreamsTrim,
  type ResolvedRedisStreamsPublisherOptions,
  type ResolvedRedisStreamsTrim,
} from './redis-streams-publisher.options';
export { RedisStreamsPublishError, type RedisStreamsFailure } from './redis-streams-publish.error';
export { classifyRedisError, type RedisFailureKind } from './redis-reply.classifier';
/** The message's `attributes.redis` (docs/broker-attributes.md). */
export type { OutboxRedisAttributes } from '../../message/outbox-message.interface';
