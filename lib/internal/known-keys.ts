// One check for every options object a user passes, at bootstrap (the module's options) and at
// run time (an admin method's options, enqueue's): a key the code does not read would otherwise
// be ignored, and a script written for another build (`expectedCount`) would run unchecked.
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { OutboxMessages } from '../outbox.messages';
import { joinOptionPath, suggestOption, type KnownOptionKeys } from './did-you-mean';

/** A key that `known` does not list: where it is, what it likely meant, what is accepted. */
export interface UnknownKey {
  /** `retry.maxAtempts`, or `expectedCount` at the top level. */
  readonly path: string;
  /** The known option it most likely meant, when one is close. */
  readonly suggestion: string | undefined;
  /** Every key accepted in the object the unknown key is in, as paths. */
  readonly accepted: readonly string[];
}

/**
 * The object at `group` (`''` the top level, `sequence.repair` one in another), if it is one. A
 * key that holds a dot itself comes first: an event type's policy (`policies["cache.invalidate"]`).
 */
function groupOf(options: object, group: string): unknown {
  if (group === '') return options;
  if (Object.hasOwn(options, group)) return (options as Record<string, unknown>)[group];
  let value: unknown = options;
  for (const part of group.split('.')) {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

/**
 * The first key of `options` (and of its groups that are objects, a dotted group one inside
 * another) that `known` does not list, or undefined when every key is known. A value that is
 * not an object has no keys to refuse: the callers check its type themselves.
 */
export function unknownKeyOf(options: unknown, known: KnownOptionKeys): UnknownKey | undefined {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) return undefined;
  for (const [group, keys] of Object.entries(known)) {
    const value = groupOf(options, group);
    if (value === null || typeof value !== 'object' || Array.isArray(value)) continue;
    for (const key of Object.keys(value)) {
      if (Object.hasOwn(keys, key)) continue;
      return {
        path: joinOptionPath(group, key),
        suggestion: suggestOption(group, key, known),
        accepted: Object.keys(keys).map((k) => joinOptionPath(group, k)),
      };
    }
  }
  return undefined;
}

/**
 * Throws what `refuse` makes of the first unknown key of `options` (see `unknownKeyOf`), so that
 * a call given an option this build does not have does nothing.
 */
export function refuseUnknownKeys(
  options: unknown,
  known: KnownOptionKeys,
  refuse: (unknown: UnknownKey) => Error,
): void {
  const found = unknownKeyOf(options, known);
  if (found !== undefined) throw refuse(found);
}

/**
 * `refuseUnknownKeys` for an options object given to a function or constructor at run time
 * (`outboxPartitions()`, `new Inbox()`, `Inbox.purge()` …): an `OutboxOptionsError` on the key's
 * path, naming `subject`, the key, the likely meant one and every accepted key.
 */
export function refuseUnknownCallOptions(
  subject: string,
  options: unknown,
  known: KnownOptionKeys,
): void {
  refuseUnknownKeys(
    options,
    known,
    ({ path, suggestion, accepted }) =>
      new OutboxOptionsError(
        OutboxMessages.unknownRuntimeOption(subject, path, suggestion, accepted),
        path,
      ),
  );
}
