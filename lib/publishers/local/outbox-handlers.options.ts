import { OptionChecks } from '../../options/option-checks';

/** Options of `OutboxHandlersModule.forRoot()`. */
export interface OutboxHandlersOptions {
  /**
   * Most handler calls running at once, across keys and batches (messages of one key always run
   * one at a time). Keep it at or below your database pool if handlers open transactions.
   * @default 10
   */
  concurrency?: number;
  /** Makes `LocalPublisher` injectable everywhere without importing the module. @default true */
  isGlobal?: boolean;
  /**
   * Runs the handlers of a message that has a tenant (`x-outbox-tenant`, docs/tenants.md) inside
   * the app's tenant context: call `run()` within it and return its promise, e.g.
   * `(tenant, run) => cls.run(() => { cls.set('tenantId', tenant); return run(); })`.
   * @default none (handlers read `message.tenant`)
   */
  tenantContext?: (tenant: string, run: () => Promise<void>) => Promise<void>;
}

export interface ResolvedOutboxHandlersOptions {
  readonly concurrency: number;
  readonly tenantContext?: (tenant: string, run: () => Promise<void>) => Promise<void>;
}

const checks = new OptionChecks('OutboxHandlersModule');

/** Defaults and checks in one place; throws `OutboxOptionsError` at bootstrap. */
export function resolveOutboxHandlersOptions(
  options: OutboxHandlersOptions = {},
): ResolvedOutboxHandlersOptions {
  checks.knownKeys(options, { '': { concurrency: true, isGlobal: true, tenantContext: true } });
  checks.bool(options.isGlobal, true, 'isGlobal');
  const { tenantContext } = options;
  if (tenantContext !== undefined && typeof tenantContext !== 'function') {
    checks.fail(
      'tenantContext',
      'it is not a function',
      'Pass (tenant, run) => runInYourTenantContext(tenant, run), returning what run() returns.',
    );
  }
  return {
    concurrency: checks.integer(options.concurrency, 10, 'concurrency', 1, 10_000),
    ...(tenantContext === undefined ? {} : { tenantContext }),
  };
}
