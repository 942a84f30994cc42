import {
  Inject,
  Injectable,
  Logger,
  type BeforeApplicationShutdown,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import type { DeliveryPlan } from '../dispatch/delivery-source.provider';
import { OUTBOX_DELIVERY_PLAN, OUTBOX_OPTIONS } from '../outbox.constants';
import { OutboxMessages } from '../outbox.messages';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';

// A worker's main.ts can only call enableShutdownHooks() once createApplicationContext() has
// bootstrapped the app, so the check waits a moment rather than looking at bootstrap itself.
const CHECK_DELAY_MS = 1_000;

/**
 * Warns when the dispatcher runs in a process where nothing handles SIGTERM. Nest exposes no
 * "shutdown hooks enabled" flag, but `enableShutdownHooks()` adds a SIGTERM listener; with none,
 * SIGTERM ends the process before `beforeApplicationShutdown`, and the messages the dispatcher
 * had claimed stay leased, each with an attempt counted, until their lease ends.
 */
@Injectable()
export class ShutdownHooksCheck implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('OutboxDispatcher');
  private timer: NodeJS.Timeout | undefined;

  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(OUTBOX_DELIVERY_PLAN) private readonly plan: Pick<DeliveryPlan, 'claims'>,
  ) {}

  onApplicationBootstrap(): void {
    if (!this.options.autoStart) return;
    this.timer = setTimeout(() => this.check(), CHECK_DELAY_MS);
    // Never what keeps a process alive.
    this.timer.unref();
  }

  beforeApplicationShutdown(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private check(): void {
    this.timer = undefined;
    if (process.listenerCount('SIGTERM') > 0) return;
    this.logger.warn(
      OutboxMessages.shutdownHooksMissing({ ...this.options.dispatcher, claims: this.plan.claims }),
    );
  }
}
