// nestjs-outbox/terminus: an outbox health indicator for @nestjs/terminus (an optional peer
// dependency).
export { OutboxHealthIndicator, type OutboxHealthDetails } from './outbox-health.indicator';
export {
  resolveOutboxHealthOptions,
  type OutboxHealthOptions,
  type ResolvedOutboxHealthOptions,
} from './outbox-health.options';
