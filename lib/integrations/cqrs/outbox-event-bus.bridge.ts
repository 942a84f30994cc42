import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import type { EventBus, IEvent } from '@nestjs/cqrs';
import type { OutboxService } from '../../outbox.service';
import type { ResolvedOutboxBridgeOptions } from '../bridge/outbox-bridge.options';
import { OutboxBridgeWriter } from '../bridge/outbox-bridge.writer';
import { OutboxEventPublisher } from './outbox-event.publisher';

/**
 * Puts {@link OutboxEventPublisher} in front of the app's `EventBus` publisher at module init,
 * and gives the EventBus its publisher back when the module is destroyed.
 */
export class OutboxEventBusBridge implements OnModuleInit, OnModuleDestroy {
  private installed: OutboxEventPublisher<IEvent> | undefined;

  constructor(
    private readonly eventBus: EventBus,
    private readonly outbox: OutboxService<unknown>,
    private readonly options: ResolvedOutboxBridgeOptions,
  ) {}

  onModuleInit(): void {
    if (this.installed !== undefined) return;
    this.installed = new OutboxEventPublisher(
      this.eventBus.publisher,
      new OutboxBridgeWriter(this.outbox, this.options, 'EventBus.publish()'),
      new OutboxBridgeWriter(this.outbox, this.options, 'EventBus.publishAll()'),
    );
    this.eventBus.publisher = this.installed;
  }

  onModuleDestroy(): void {
    // Only when nobody replaced it since: their publisher stays theirs.
    if (this.installed !== undefined && this.eventBus.publisher === this.installed) {
      this.eventBus.publisher = this.installed.inner;
    }
    this.installed = undefined;
  }
}
