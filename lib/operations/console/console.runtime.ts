import {
  Logger,
  type CanActivate,
  type ExecutionContext,
  type HttpServer,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
  type OnModuleInit,
} from '@nestjs/common';
import { HttpAdapterHost, type ModuleRef } from '@nestjs/core';
import { isObservable, lastValueFrom } from 'rxjs';
import { OutboxDispatcher, type OutboxDispatcherStatus } from '../../dispatch/outbox.dispatcher';
import { getOutboxToken } from '../../module/outbox.tokens';
import type { OutboxAdmin } from '../../module/admin/outbox.admin';
import { ConsoleAuditStore } from './audit/console-audit-store';
import { BacklogSampler } from './backlog-sampler';
import { ConsoleAuditLog } from './console-audit';
import { ConsoleCsrf } from './console-csrf';
import { checkFormBodyParser } from './console-form-body';
import {
  resolveOutboxConsoleOptions,
  type OutboxConsoleOptions,
  type OutboxConsoleRequest,
  type ResolvedOutboxConsoleOptions,
} from './console.options';

/**
 * Everything one mounted console holds: its checked options, the admin API of its outbox, the
 * backlog sampler, the audit log and the CSRF key (from the replicas' `csrfSecret`, or this
 * process's own). Built when the app starts, so a console without an access check fails the
 * start, not the first request.
 */
export class ConsoleRuntime implements OnModuleInit, OnApplicationBootstrap, OnModuleDestroy {
  readonly options: ResolvedOutboxConsoleOptions;
  readonly sampler: BacklogSampler;
  readonly audit: ConsoleAuditLog;
  readonly csrf: ConsoleCsrf;
  private guard: CanActivate | null = null;
  private readonly auditTable: ConsoleAuditStore | null;
  private dispatcher: OutboxDispatcher | null = null;
  private readonly logger = new Logger('OutboxConsole');

  constructor(
    readonly path: string,
    private readonly outbox: string,
    readonly admin: OutboxAdmin,
    options: OutboxConsoleOptions,
    private readonly moduleRef: ModuleRef,
  ) {
    this.options = resolveOutboxConsoleOptions(options);
    this.csrf = new ConsoleCsrf({ secret: this.options.csrfSecret, scope: path });
    this.sampler = new BacklogSampler(admin, this.options.sampleIntervalMs);
    const { auditTable } = this.options;
    this.auditTable =
      auditTable === null ? null : new ConsoleAuditStore(auditTable.dataSource, auditTable);
    this.audit = new ConsoleAuditLog(this.options.audit, this.auditTable);
  }

  async onModuleInit(): Promise<void> {
    await this.auditTable?.check();
    try {
      this.dispatcher = this.moduleRef.get<OutboxDispatcher>(
        getOutboxToken(this.outbox, OutboxDispatcher),
        {
          strict: false,
        },
      );
    } catch {
      // workers: false: this instance has no dispatcher to report on.
      this.dispatcher = null;
    }
    const { guard } = this.options;
    if (guard !== null) {
      // The app's instance when it provides the guard; otherwise one built with its dependencies.
      try {
        this.guard = this.moduleRef.get(guard, { strict: false });
      } catch {
        this.guard = await this.moduleRef.create(guard);
      }
    }
  }

  onApplicationBootstrap(): void {
    if (!this.options.readOnly) checkFormBodyParser(this.httpServer(), this.path);
    if (
      this.options.unsafeAllowAnonymous &&
      this.guard === null &&
      this.options.authorize === null
    ) {
      this.logger.warn(
        `The outbox console at ${this.path} is open to anyone who can reach this server (unsafeAllowAnonymous: true): it shows payloads and can retry and purge dead letters. Give it a guard or authorize before this app leaves a development machine.`,
      );
    }
    if (!this.options.readOnly && this.options.csrfSecret === null) {
      // A note, not a warning: one instance is a sound deployment. Logged once per boot.
      this.logger.log(
        `The outbox console at ${this.path} signs its action tokens with a key of this process: with several replicas behind a load balancer, give each the same csrfSecret (32 bytes or more), or a page one replica showed has its actions refused by another.`,
      );
    }
    this.sampler.start();
  }

  async onModuleDestroy(): Promise<void> {
    await this.sampler.stop();
  }

  private httpServer(): HttpServer | undefined {
    try {
      return this.moduleRef.get(HttpAdapterHost, { strict: false }).httpAdapter;
    } catch {
      return undefined; // an app without an HTTP server (a bare application context)
    }
  }

  /** This instance's dispatcher, when it has one (other instances' are not known here). */
  dispatcherStatus(): OutboxDispatcherStatus | null {
    return this.dispatcher?.status() ?? null;
  }

  /**
   * Who is behind a request, as the audit log names them (`actor`): the principal the app's
   * guard resolved, else `anonymous@<ip>`. A CSRF token is only taken from the one it was shown to.
   */
  principal(request: OutboxConsoleRequest): string {
    return this.options.actor(request);
  }

  /** Whether the app's guard or callback lets this request in. */
  async allows(context: ExecutionContext): Promise<boolean> {
    if (this.guard !== null) {
      const answer = this.guard.canActivate(context);
      return Boolean(isObservable(answer) ? await lastValueFrom(answer) : await answer);
    }
    const { authorize } = this.options;
    if (authorize !== null) {
      return (await authorize(context.switchToHttp().getRequest<OutboxConsoleRequest>())) === true;
    }
    return this.options.unsafeAllowAnonymous;
  }
}
