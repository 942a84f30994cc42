/**
 * `nestjs-outbox/cls`: the outbox with `@nestjs-cls/transactional`. `fromClsTransactionHost()`
 * lets `enqueue()` join the ambient transaction (the module's `ambientTransaction` option), and
 * `guardOutboxWrites()` wraps the plugin's adapter so that no write of the event-bus bridges
 * (`nestjs-outbox/cqrs`, `nestjs-outbox/event-emitter`) escapes its transaction. Both take the
 * library's objects by their shape, so no optional peer is loaded. See docs/enqueue.md and
 * docs/event-bus.md.
 */
export { fromClsTransactionHost, type ClsTransactionHostLike } from './cls-transaction.adapter';
export {
  guardOutboxWrites,
  type TransactionalAdapterLike,
  type TransactionalAdapterOptionsLike,
} from './guard-outbox-writes';
