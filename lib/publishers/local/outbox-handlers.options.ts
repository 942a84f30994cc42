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
}

export interface ResolvedOutboxHandlersOptions {
  readonly concurrency: number;
}

const checks = new OptionChecks('OutboxHandlersModule');

/** Defaults and checks in one place; throws `OutboxOptionsError` at bootstrap. */
export function resolveOutboxHandlersOptions(
  options: OutboxHandlersOptions = {},
): ResolvedOutboxHandlersOptions {
  checks.knownKeys(options, { '': { concurrency: true, isGlobal: true } });
  checks.bool(options.isGlobal, true, 'isGlobal');
  return { concurrency: checks.integer(options.concurrency, 10, 'concurrency', 1, 10_000) };
}
