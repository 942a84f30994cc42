import type { IEvent, IEventPublisher } from '@nestjs/cqrs';
import { isOutboxEvent, type OutboxBridgeWriter } from '../bridge/outbox-bridge.writer';

/**
 * The `EventBus` publisher while the bridge is on: `@OutboxEvent` instances go to the outbox in
 * the current transaction (the returned promise settles with the write: await it), every other
 * event goes to the publisher it replaced (the in-memory one by default), untouched.
 */
export class OutboxEventPublisher<
  EventBase extends IEvent = IEvent,
> implements IEventPublisher<EventBase> {
  constructor(
    /** The publisher the EventBus had before. */
    readonly inner: IEventPublisher<EventBase>,
    private readonly writer: OutboxBridgeWriter,
    private readonly writerOfAll: OutboxBridgeWriter,
  ) {}

  publish<TEvent extends EventBase>(
    event: TEvent,
    dispatcherContext?: unknown,
    asyncContext?: Parameters<IEventPublisher<EventBase>['publish']>[2],
  ): unknown {
    if (isOutboxEvent(event)) {
      const written = this.writer.write([event]);
      if (written !== undefined) return written;
    }
    return this.inner.publish(event, dispatcherContext, asyncContext);
  }

  publishAll<TEvent extends EventBase>(
    events: TEvent[],
    dispatcherContext?: unknown,
    asyncContext?: Parameters<IEventPublisher<EventBase>['publish']>[2],
  ): unknown {
    const outbox = events.filter((event) => isOutboxEvent(event));
    // Outbox events of the call are written in one statement; only the others are handed on.
    const written = outbox.length === 0 ? undefined : this.writerOfAll.write(outbox);
    if (written === undefined) return this.handOn(events, dispatcherContext, asyncContext);
    const others = events.filter((event) => !isOutboxEvent(event));
    if (others.length > 0) this.handOn(others, dispatcherContext, asyncContext);
    return written;
  }

  private handOn(
    events: EventBase[],
    dispatcherContext: unknown,
    asyncContext: Parameters<IEventPublisher<EventBase>['publish']>[2],
  ): unknown {
    if (this.inner.publishAll !== undefined) {
      return this.inner.publishAll(events, dispatcherContext, asyncContext) as unknown;
    }
    return events.map(
      (event): unknown => this.inner.publish(event, dispatcherContext, asyncContext) as unknown,
    );
  }
}
