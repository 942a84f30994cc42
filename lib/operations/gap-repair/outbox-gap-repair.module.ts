import {
  Controller,
  Inject,
  Injectable,
  Logger,
  Module,
  UseGuards,
  type CanActivate,
  type DynamicModule,
  type ExecutionContext,
  type Provider,
} from '@nestjs/common';
import { OutboxGapRepairer } from '../../module/admin/outbox-gap-repair';
import { OutboxAdmin } from '../../module/admin/outbox.admin';
import { getOutboxToken } from '../../module/outbox.tokens';
import {
  resolveGapRepairRoute,
  type GapRepairHttpRequest,
  type OutboxGapRepairModuleOptions,
} from './gap-repair-route.options';
import { OutboxGapRepairController } from './outbox-gap-repair.controller';

const AUTHORIZE = Symbol('OUTBOX_GAP_REPAIR_AUTHORIZE');

/** Runs the module's `authorize` callback, or lets everyone through (`unsafeAllowAnonymous`). */
@Injectable()
class GapRepairAuthorizeGuard implements CanActivate {
  constructor(
    @Inject(AUTHORIZE) private readonly authorize: OutboxGapRepairModuleOptions['authorize'] | null,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    if (this.authorize === null || this.authorize === undefined) return true;
    return this.authorize(context.switchToHttp().getRequest<GapRepairHttpRequest>());
  }
}

/**
 * The producer's gap-repair route (docs/gap-repair.md): consumers whose gap guard saw a key jump
 * POST the missing numbers here, and the outbox sends exactly those messages again (audited,
 * rate-limited) or says why not. Served by the app's own HTTP server under `path`; refuses to
 * start without an access check (`guard` or `authorize`) unless `unsafeAllowAnonymous: true`.
 * Needs `ordering: { sequence: true }` on the OutboxModule and the audit table.
 *
 * @example
 * OutboxGapRepairModule.forRoot({ path: '/internal/gap-repair', guard: ServiceTokenGuard })
 */
@Module({})
export class OutboxGapRepairModule {
  static forRoot(options: OutboxGapRepairModuleOptions): DynamicModule {
    const { path, outbox, guard, authorize } = resolveGapRepairRoute(options);
    const { ratePerSecond, burst, maxSequences, resendAfterMs, auditTable } = options;
    const access = guard ?? GapRepairAuthorizeGuard;
    // One controller class per mount, so that two routes (two outboxes) never share metadata.
    @Controller(path)
    @UseGuards(access)
    class MountedOutboxGapRepairController extends OutboxGapRepairController {}
    const providers: Provider[] = [
      {
        provide: OutboxGapRepairer,
        inject: [getOutboxToken(outbox, OutboxAdmin)],
        // Built once: it holds the rate limit. Throws OutboxOptionsError at bootstrap without
        // ordering.sequence.
        useFactory: (admin: OutboxAdmin) => {
          if (guard === null && authorize === null) {
            new Logger(OutboxGapRepairModule.name).warn(
              `The gap-repair route ${path} answers anyone who reaches it (unsafeAllowAnonymous): ` +
                'give it a guard or authorize outside a private network (docs/gap-repair.md#securing-the-route).',
            );
          }
          return admin.gapRepairer({
            ratePerSecond,
            burst,
            maxSequences,
            resendAfterMs,
            auditTable,
          });
        },
      },
      // Read by GapRepairAuthorizeGuard, which Nest builds for the route (a guard is an
      // injectable of the controller, not a provider looked up by class).
      { provide: AUTHORIZE, useValue: authorize },
    ];
    return {
      module: OutboxGapRepairModule,
      controllers: [MountedOutboxGapRepairController],
      providers,
    };
  }
}
