import {
  Injectable,
  type BeforeApplicationShutdown,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { OutboxService } from '../../outbox.service';
import { OutboxDispatcher } from '../../dispatch/outbox.dispatcher';
import { OutboxMetrics } from './outbox.metrics';

/** Starts the gauges' sampling at bootstrap and stops it before the outbox closes its store. */
@Injectable()
export class OutboxMetricsSampler implements OnApplicationBootstrap, BeforeApplicationShutdown {
  constructor(
    private readonly metrics: OutboxMetrics,
    private readonly moduleRef: ModuleRef,
  ) {}

  onApplicationBootstrap(): void {
    // Looked up, not injected: OutboxModule's options usually inject OutboxMetrics (for the
    // observer), and OutboxModule need not be global for this module to find its service.
    this.metrics.startSampling(
      this.moduleRef.get(OutboxService, { strict: false }),
      this.dispatcher(),
    );
  }

  /** The default instance's dispatcher, for the log-tailing gauges; none in an enqueue-only app. */
  private dispatcher(): OutboxDispatcher | undefined {
    try {
      return this.moduleRef.get(OutboxDispatcher, { strict: false });
    } catch {
      return undefined;
    }
  }

  beforeApplicationShutdown(): Promise<void> {
    return this.metrics.stopSampling();
  }
}
