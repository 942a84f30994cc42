import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxMessages } from '../outbox.messages';
import type { OutboxLogObserver } from '../store/ports/outbox-log-source.port';
import { OUTBOX_DEFAULTS } from './outbox-defaults';
import { checks, fail } from './outbox-option-checks';
import type { OutboxDelivery, OutboxDispatcherOptions } from './outbox.options';

/**
 * The delivery mode, resolved: the dispatcher polls the table, reads the database's log (the
 * observer `logTailing()` made), or nothing is delivered here (`'external'`). What each mode
 * makes the dispatcher and the workers do is decided by `planDelivery`
 * (lib/dispatch/delivery-source.provider.ts), the only other reader of this value.
 */
export type ResolvedDelivery = 'poll' | OutboxLogObserver | 'external';

/** `resolveDelivery`'s answer: the mode, and the warning the 0.2 spelling earns at bootstrap. */
export interface DeliveryResolution {
  readonly delivery: ResolvedDelivery;
  /** Said at bootstrap when the options use the 0.2 pair; null otherwise. */
  readonly deprecation: string | null;
}

/** Who delivers a table's messages, from `delivery` as written: what admin and the console say. */
export function deliveredBy(delivery: OutboxDelivery | undefined): 'dispatcher' | 'external' {
  return delivery === 'external' ? 'external' : 'dispatcher';
}

export function isLogObserver(value: unknown): value is OutboxLogObserver {
  if (typeof value !== 'object' || value === null) return false;
  const { kind, create } = value as { kind?: unknown; create?: unknown };
  return kind === 'log' && typeof create === 'function';
}

// The 0.2 `dispatcher.observe`: 'poll' or a log observer.
function resolveObserve(value: unknown): 'poll' | OutboxLogObserver {
  if (value === 'poll' || isLogObserver(value)) return value;
  return fail(
    'dispatcher.observe',
    `${typeof value === 'string' ? JSON.stringify(value) : typeof value} is neither 'poll' nor a log observer`,
    "Better, remove it and write the top-level delivery: 'poll' (the default) or delivery: logTailing() from nestjs-outbox/log-tailing.",
  );
}

function resolveMode(value: unknown): ResolvedDelivery | 'dispatcher' {
  if (value === 'poll' || value === 'external' || value === 'dispatcher') return value;
  if (isLogObserver(value)) return value;
  throw new OutboxOptionsError(OutboxMessages.deliveryNotAMode(checks.show(value)), 'delivery');
}

/**
 * The delivery mode from `delivery` and, for one release, the 0.2 pair it replaces
 * (`delivery: 'dispatcher'`, `dispatcher.observe`): the old spelling still works and earns a
 * deprecation that says what to write instead; the two spellings mixed fail, saying which to keep.
 * Pure: the module says the deprecation at bootstrap.
 */
export function resolveDelivery(
  value: OutboxDelivery | undefined,
  dispatcher: OutboxDispatcherOptions | undefined,
  outbox: string,
): DeliveryResolution {
  const given = resolveMode(value ?? OUTBOX_DEFAULTS[''].delivery.value);
  // A group that is not an object fails in the dispatcher's resolver, naming it.
  const observeValue =
    typeof dispatcher === 'object' && dispatcher !== null ? dispatcher.observe : undefined;
  const deprecated = (written: string, write: string): string =>
    OutboxMessages.deliveryDeprecated(outbox, written, write);
  if (observeValue === undefined) {
    if (given !== 'dispatcher') return { delivery: given, deprecation: null };
    return {
      delivery: 'poll',
      deprecation: deprecated("delivery: 'dispatcher'", "delivery: 'poll' (or leave it out)"),
    };
  }
  const observe = resolveObserve(observeValue);
  if (given === 'external') {
    if (observe !== 'poll') {
      throw new OutboxOptionsError(
        OutboxMessages.logTailingWithExternalDelivery(),
        'dispatcher.observe',
      );
    }
    return {
      delivery: 'external',
      deprecation: deprecated(
        "dispatcher.observe: 'poll'",
        "delivery: 'external' alone (remove dispatcher.observe)",
      ),
    };
  }
  if (value !== undefined && given !== 'dispatcher') {
    throw new OutboxOptionsError(
      OutboxMessages.observeBesideDelivery(given === 'poll' ? "'poll'" : 'logTailing(…)'),
      'dispatcher.observe',
    );
  }
  const written = `${given === 'dispatcher' ? "delivery: 'dispatcher' with " : ''}dispatcher.observe: ${observe === 'poll' ? "'poll'" : 'logTailing(…)'}`;
  const write =
    observe === 'poll'
      ? "delivery: 'poll' (or leave it out) and remove dispatcher.observe"
      : 'delivery: logTailing(…) (the same logTailing() call) and remove dispatcher.observe';
  return { delivery: observe, deprecation: deprecated(written, write) };
}
