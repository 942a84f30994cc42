import type { OptionChecks } from '../../options/option-checks';
import type { ReconnectDelays } from './reconnect-backoff';

/** The `reconnect` option of a reconnecting publisher (RabbitMQ, Redis Streams, JetStream). */
export interface PublisherReconnectOption {
  /** @default 500 */
  initialDelayMs?: number;
  /** @default max(15000, initialDelayMs) */
  maxDelayMs?: number;
}

/** The keys of {@link PublisherReconnectOption}, for `OptionChecks.knownKeys`. */
export const RECONNECT_OPTION_KEYS = {
  initialDelayMs: true,
  maxDelayMs: true,
} as const satisfies Record<keyof PublisherReconnectOption, true>;

/** Rejects options that are not an object, naming an example of what to pass. */
export function checkOptionsObject(
  checks: OptionChecks,
  options: unknown,
  example: string,
): asserts options is object {
  if (options === null || typeof options !== 'object') {
    checks.fail('options', `${checks.show(options)} is not an object`, `Pass ${example}.`);
  }
}

/** The `reconnect` option with its defaults, checked. */
export function resolveReconnectOption(
  checks: OptionChecks,
  value: PublisherReconnectOption | undefined,
): ReconnectDelays {
  const reconnect = value ?? {};
  if (typeof reconnect !== 'object' || reconnect === null)
    checks.fail(
      'reconnect',
      'it is not an object',
      'Pass { initialDelayMs, maxDelayMs } or leave it out.',
    );
  const initialDelayMs = checks.integer(
    reconnect.initialDelayMs,
    500,
    'reconnect.initialDelayMs',
    0,
    600_000,
  );
  const maxDelayMs = checks.integer(
    reconnect.maxDelayMs,
    // A larger first wait than the default maximum raises the maximum with it.
    Math.max(15_000, initialDelayMs),
    'reconnect.maxDelayMs',
    0,
    3_600_000,
  );
  if (maxDelayMs < initialDelayMs) {
    checks.fail(
      'reconnect.maxDelayMs',
      `${maxDelayMs} ms is below reconnect.initialDelayMs (${initialDelayMs} ms)`,
      'Raise maxDelayMs or lower initialDelayMs.',
    );
  }
  return { initialDelayMs, maxDelayMs };
}

/**
 * The publisher's own `publishTimeoutMs`: how long it waits for the broker's answer to a
 * message. The same default and range for every broker, so that one reads like the other.
 */
export function resolvePublishTimeout(checks: OptionChecks, value: number | undefined): number {
  return checks.integer(value, 5_000, 'publishTimeoutMs', 10, 3_600_000);
}

/** The time allowed to open a connection, under the option name the broker's publisher uses. */
export function resolveConnectTimeout(
  checks: OptionChecks,
  value: number | undefined,
  option: 'connectionTimeoutMs' | 'connectTimeoutMs',
): number {
  return checks.integer(value, 5_000, option, 100, 600_000);
}
