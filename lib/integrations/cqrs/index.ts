/**
 * `nestjs-outbox/cqrs`: `EventBus.publish()` of an `@OutboxEvent` inside a transaction becomes an
 * outbox write in it (`OutboxCqrsModule.forRoot()`). Loads `@nestjs/cqrs`, which the core never
 * does.
 */
export { OutboxCqrsModule } from './outbox-cqrs.module';
export { OutboxEventBusBridge } from './outbox-event-bus.bridge';
export { OutboxEventPublisher } from './outbox-event.publisher';
export type { OutboxBridgeOptions } from '../bridge/outbox-bridge.options';
