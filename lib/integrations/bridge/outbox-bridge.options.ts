import { DEFAULT_OUTBOX_NAME } from '../../outbox.constants';
import { OptionChecks, type KnownOptionKeys } from '../../options/option-checks';

/** Options of an event-bus bridge (`OutboxCqrsModule`, `OutboxEventEmitterModule`). */
export interface OutboxBridgeOptions {
  /**
   * What an `@OutboxEvent` published outside a transaction does: `'refuse'` throws
   * `OutboxTransactionRequiredError` (the event would otherwise never reach the outbox);
   * `'publish'` hands it to the in-memory handlers only, as if the bridge were not there.
   * @default 'refuse'
   */
  readonly outsideTransaction?: 'refuse' | 'publish';
  /**
   * Refuse (`OutboxBridgeError`, reason `unguarded-transaction`) to write in a transaction whose
   * `@nestjs-cls/transactional` adapter is not wrapped with `guardOutboxWrites()`, which is what
   * rolls back a transaction that ends before its bridge writes do.
   * @default true
   */
  readonly requireGuard?: boolean;
  /** The name of the `OutboxModule` instance to write to. @default the default instance */
  readonly outbox?: string;
}

export interface ResolvedOutboxBridgeOptions {
  readonly outsideTransaction: 'refuse' | 'publish';
  readonly requireGuard: boolean;
  readonly outbox: string;
}

const KNOWN = {
  '': { outsideTransaction: true, requireGuard: true, outbox: true },
} as const satisfies KnownOptionKeys & {
  '': Record<keyof OutboxBridgeOptions, true>;
};

/** Defaults and checks of a bridge's options; `subject` names the module in messages. */
export function resolveOutboxBridgeOptions(
  subject: string,
  options: OutboxBridgeOptions | undefined,
): ResolvedOutboxBridgeOptions {
  const checks = new OptionChecks(subject);
  const given: OutboxBridgeOptions = options ?? {};
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    checks.fail('options', `${checks.show(given)} is not an object`, 'Pass an options object.');
  }
  checks.knownKeys(given, KNOWN);
  const outside: unknown = given.outsideTransaction;
  if (outside !== undefined && outside !== 'refuse' && outside !== 'publish') {
    return checks.fail(
      'outsideTransaction',
      `${checks.show(outside)} is neither 'refuse' nor 'publish'`,
      "Use 'refuse' (the default) or 'publish'.",
    );
  }
  return {
    outsideTransaction: outside ?? 'refuse',
    requireGuard: checks.bool(given.requireGuard, true, 'requireGuard'),
    outbox: instanceName(checks, given.outbox),
  };
}

function instanceName(checks: OptionChecks, name: unknown): string {
  if (name === undefined) return DEFAULT_OUTBOX_NAME;
  if (typeof name !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(name)) {
    checks.fail(
      'outbox',
      `${checks.show(name)} is not an OutboxModule instance name`,
      'Give the name passed to OutboxModule.forRoot({ name }), or leave it out for the default instance.',
    );
  }
  return name;
}
