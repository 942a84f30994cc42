import { getOutboxEventClassMetadata } from '../message/outbox-event.decorator';
import type { OutboxEventPolicy, OutboxEventRetryPolicy } from '../message/outbox-event-policy';
import { EVENT_POLICY_KEYS, EVENT_POLICY_RETRY_KEYS } from '../message/outbox-event-option-keys';
import { checks, DAY, fail, MINUTE } from './outbox-option-checks';
import type { OutboxModuleOptions } from './outbox.options';
import type { ResolvedCleanerOptions, ResolvedRetryOptions } from './resolve-group-options';

/** One event type's policy with the module's defaults filled in. */
export interface ResolvedEventPolicy {
  /** `'default'` (the module's options), or the event type the policy was given for. */
  readonly name: string;
  readonly retry: ResolvedRetryOptions;
  readonly onDeadLetter: 'block' | 'skip';
  readonly deliveredRetentionMs: number;
  readonly deadRetentionMs: number | null;
  /** Message expiry (ms since enqueue); 0: none. */
  readonly maxAgeMs: number;
  /** The type's claim-check threshold: undefined the module's, null none (checked with `claimCheck`). */
  readonly claimCheckThresholdBytes?: number | null;
}

/** Every policy of an instance, resolved once at bootstrap. */
export interface ResolvedEventPolicies {
  /** The module's own settings, for every type without a policy. */
  readonly default: ResolvedEventPolicy;
  /** The types given a policy, each merged over the defaults. */
  readonly types: ReadonlyMap<string, ResolvedEventPolicy>;
  /** The policy a message of `eventType` is delivered under. */
  policyFor(eventType: string): ResolvedEventPolicy;
}

/**
 * What a policy's type name may hold. The stores inline the names of types whose `onDeadLetter`
 * differs from the module's into their blocking checks as SQL literals, so a name must not
 * carry a quote, a backslash or anything else a literal would have to escape.
 */
export const POLICY_TYPE_PATTERN = /^[A-Za-z0-9_][A-Za-z0-9_.:/@#+-]{0,254}$/;

const { show, integer, real } = checks;

interface PolicyContext {
  readonly retry: ResolvedRetryOptions;
  readonly onDeadLetter: 'block' | 'skip';
  readonly cleaner: ResolvedCleanerOptions;
  /** Why per-type retention cannot apply (a partitioned table, external delivery), or undefined. */
  readonly noRetention: string | undefined;
}

/**
 * Resolves `events` (the classes whose `@OutboxEvent` policy applies) and `policies` (by type)
 * into one lookup, every value checked: a bad value, an unknown key, a type named in both places
 * or a type name that is not plain fails the bootstrap with an `OutboxOptionsError`.
 */
export function resolveEventPolicies(
  options: Pick<OutboxModuleOptions, 'events' | 'policies'>,
  context: PolicyContext,
): ResolvedEventPolicies {
  const defaults: ResolvedEventPolicy = Object.freeze({
    name: 'default',
    retry: context.retry,
    onDeadLetter: context.onDeadLetter,
    deliveredRetentionMs: context.cleaner.deliveredRetentionMs,
    deadRetentionMs: context.cleaner.deadRetentionMs,
    maxAgeMs: 0,
  });
  const given = new Map<string, { policy: unknown; from: string }>();
  collectFromEvents(options.events, given);
  collectFromPolicies(options.policies, given);
  const types = new Map<string, ResolvedEventPolicy>();
  for (const [type, { policy, from }] of given) {
    types.set(type, resolveOne(type, policy, from, defaults, context));
  }
  return Object.freeze({
    default: defaults,
    types,
    policyFor: (eventType: string): ResolvedEventPolicy => types.get(eventType) ?? defaults,
  });
}

/**
 * The types whose dead messages do the opposite of the module's `ordering.onDeadLetter`, sorted:
 * what the stores' blocking checks must treat apart.
 */
export function deadLetterExceptions(policies: ResolvedEventPolicies): readonly string[] {
  return [...policies.types.values()]
    .filter((p) => p.onDeadLetter !== policies.default.onDeadLetter)
    .map((p) => p.name)
    .sort();
}

function collectFromEvents(
  events: OutboxModuleOptions['events'],
  given: Map<string, { policy: unknown; from: string }>,
): void {
  if (events === undefined) return;
  if (!Array.isArray(events)) {
    fail(
      'events',
      `${show(events)} is not an array`,
      'Pass the event classes: [OrderPlaced, PaymentCaptured].',
    );
  }
  (events as readonly unknown[]).forEach((event, i) => {
    const meta = getOutboxEventClassMetadata(event);
    if (meta === undefined) {
      const name = typeof event === 'function' ? event.name : show(event);
      fail(
        `events[${i}]`,
        `${name} is not a class decorated with @OutboxEvent()`,
        'List only event classes, or give the policy by type name in policies.',
      );
    }
    if (meta.policy === undefined) return;
    const from = `events[${i}] (${(event as { name: string }).name}, type ${JSON.stringify(meta.type)})`;
    const earlier = given.get(meta.type);
    if (earlier !== undefined && earlier.policy !== meta.policy) {
      fail(
        from,
        `its type already has a policy from ${earlier.from}`,
        'Give each event type one policy: on one class, or in policies.',
      );
    }
    given.set(meta.type, { policy: meta.policy, from });
  });
}

function collectFromPolicies(
  policies: OutboxModuleOptions['policies'],
  given: Map<string, { policy: unknown; from: string }>,
): void {
  if (policies === undefined) return;
  if (policies === null || typeof policies !== 'object' || Array.isArray(policies)) {
    fail(
      'policies',
      `${show(policies)} is not an object`,
      "Pass { 'event.type': { onDeadLetter: 'skip', ... } }.",
    );
  }
  for (const [type, policy] of Object.entries(policies)) {
    const from = `policies[${JSON.stringify(type)}]`;
    const earlier = given.get(type);
    if (earlier !== undefined) {
      fail(
        from,
        `the type also has a policy from ${earlier.from}`,
        'Give each event type one policy: on its class (listed in events), or in policies.',
      );
    }
    given.set(type, { policy, from });
  }
}

function resolveOne(
  type: string,
  value: unknown,
  from: string,
  defaults: ResolvedEventPolicy,
  context: PolicyContext,
): ResolvedEventPolicy {
  if (!POLICY_TYPE_PATTERN.test(type)) {
    fail(
      from,
      `the event type ${JSON.stringify(type)} cannot have a policy: a policy's type must be 1 to 255 letters, digits and _ . : / @ # + - (starting with a letter, digit or _)`,
      'Rename the event type, or leave it to the module defaults.',
    );
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    fail(from, `${show(value)} is not an object`, "Pass { onDeadLetter: 'skip', ... }.");
  }
  const policy = value as OutboxEventPolicy;
  const retryValue: unknown = policy.retry;
  if (
    retryValue !== undefined &&
    (retryValue === null || typeof retryValue !== 'object' || Array.isArray(retryValue))
  ) {
    fail(`${from}.retry`, `${show(retryValue)} is not an object`, 'Pass { maxAttempts, ... }.');
  }
  checks.knownKeys(
    { [from]: policy, [`${from}.retry`]: retryValue },
    { [from]: EVENT_POLICY_KEYS, [`${from}.retry`]: EVENT_POLICY_RETRY_KEYS },
  );
  const onDeadLetter = policy.onDeadLetter ?? defaults.onDeadLetter;
  if (onDeadLetter !== 'block' && onDeadLetter !== 'skip') {
    fail(
      `${from}.onDeadLetter`,
      `${show(onDeadLetter)} is not a policy`,
      "Use 'block' (hold the key until an operator acts) or 'skip'.",
    );
  }
  const retention = (key: 'deliveredRetentionMs' | 'deadRetentionMs'): void => {
    if (policy[key] === undefined || context.noRetention === undefined) return;
    fail(`${from}.${key}`, context.noRetention, `Leave ${key} out of the policy.`);
  };
  retention('deliveredRetentionMs');
  retention('deadRetentionMs');
  const deliveredRetentionMs = integer(
    policy.deliveredRetentionMs,
    defaults.deliveredRetentionMs,
    `${from}.deliveredRetentionMs`,
    0,
    3650 * DAY,
    ' ms',
  );
  if (policy.deliveredRetentionMs !== undefined && defaults.deliveredRetentionMs === 0) {
    // Retention 0 deletes every delivered row in the settle: none would stay for the cleaner.
    fail(
      `${from}.deliveredRetentionMs`,
      'it cannot apply while cleaner.deliveredRetentionMs is 0 (delivered rows are deleted when they are settled)',
      'Give cleaner.deliveredRetentionMs a retention above 0, or leave deliveredRetentionMs out of the policy.',
    );
  }
  const deadRetentionMs =
    policy.deadRetentionMs === undefined
      ? defaults.deadRetentionMs
      : policy.deadRetentionMs === null
        ? null
        : integer(
            policy.deadRetentionMs,
            0,
            `${from}.deadRetentionMs`,
            MINUTE,
            3650 * DAY,
            ' ms',
            'null: dead letters are kept until purged',
          );
  return Object.freeze({
    name: type,
    retry: resolvePolicyRetry(policy.retry, defaults.retry, `${from}.retry`),
    onDeadLetter,
    deliveredRetentionMs,
    deadRetentionMs,
    maxAgeMs: integer(policy.maxAgeMs, 0, `${from}.maxAgeMs`, 0, 3650 * DAY, ' ms'),
    ...(policy.claimCheckThresholdBytes === undefined
      ? {}
      : {
          claimCheckThresholdBytes:
            policy.claimCheckThresholdBytes === null
              ? null
              : integer(
                  policy.claimCheckThresholdBytes,
                  0,
                  `${from}.claimCheckThresholdBytes`,
                  0,
                  64 * 1024 * 1024,
                  ' bytes',
                  'null: every payload of the type travels in its message',
                ),
        }),
  });
}

function resolvePolicyRetry(
  value: OutboxEventRetryPolicy | undefined,
  defaults: ResolvedRetryOptions,
  path: string,
): ResolvedRetryOptions {
  if (value === undefined) return defaults;
  const initialDelayMs = integer(
    value.initialDelayMs,
    defaults.initialDelayMs,
    `${path}.initialDelayMs`,
    0,
    DAY,
    ' ms',
  );
  const maxDelayMs = integer(
    value.maxDelayMs,
    Math.max(defaults.maxDelayMs, initialDelayMs),
    `${path}.maxDelayMs`,
    0,
    30 * DAY,
    ' ms',
  );
  if (maxDelayMs < initialDelayMs) {
    fail(
      `${path}.maxDelayMs`,
      `${maxDelayMs} ms is below its initialDelayMs (${initialDelayMs} ms)`,
      'Raise maxDelayMs or lower initialDelayMs.',
    );
  }
  return {
    ...defaults,
    maxAttempts:
      value.maxAttempts === Number.POSITIVE_INFINITY
        ? value.maxAttempts
        : integer(
            value.maxAttempts,
            defaults.maxAttempts,
            `${path}.maxAttempts`,
            1,
            1_000,
            '',
            `retry.maxAttempts (${defaults.maxAttempts}); Infinity retries without a limit`,
          ),
    initialDelayMs,
    maxDelayMs,
    factor: real(value.factor, defaults.factor, `${path}.factor`, 1, 100),
    jitter: real(value.jitter, defaults.jitter, `${path}.jitter`, 0, 1),
  };
}
