/**
 * `nestjs-outbox/event-emitter`: `EventEmitter2.emitAsync()` of an `@OutboxEvent` inside a
 * transaction becomes an outbox write in it (`OutboxEventEmitterModule.forRoot()`). Loads
 * `@nestjs/event-emitter`, which the core never does.
 */
export { OutboxEventEmitterModule } from './outbox-event-emitter.module';
export { OutboxEventEmitterBridge } from './outbox-event-emitter.bridge';
export type { OutboxBridgeOptions } from '../bridge/outbox-bridge.options';
