import { OptionChecks } from '../../options/option-checks';
import type { OutboxCloudEvents } from '../cloud-events/outbox-cloud-events.port';
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

/**
 * The checks of a broker publisher's options: the module's `OptionChecks`, and the options every
 * broker's publisher shares, with one default and one range each, so that one publisher's
 * options read like another's and a new publisher checks only what is its own.
 */
export class PublisherOptionChecks extends OptionChecks {
  /** Rejects options that are not an object, naming an example of what to pass. */
  readonly optionsObject: (options: unknown, example: string) => asserts options is object = (
    options,
    example,
  ) => {
    if (options === null || typeof options !== 'object') {
      this.fail('options', `${this.show(options)} is not an object`, `Pass ${example}.`);
    }
  };

  /** A boolean option; left out (or null) it takes `fallback`. `fix` says what to pass. */
  readonly flag = (value: unknown, fallback: boolean, option: string, fix: string): boolean => {
    const flag = value ?? fallback;
    if (typeof flag !== 'boolean') this.fail(option, `${this.show(flag)} is not a boolean`, fix);
    return flag;
  };

  /** Rejects a function option (a route, a hook) given as anything but a function. */
  readonly optionalFunction = (value: unknown, option: string, fix: string): void => {
    if (value !== undefined && typeof value !== 'function') {
      this.fail(option, 'it is not a function', fix);
    }
  };

  /** The `reconnect` option with its defaults, checked. */
  readonly reconnect = (value: PublisherReconnectOption | undefined): ReconnectDelays => {
    const reconnect = value ?? {};
    if (typeof reconnect !== 'object' || reconnect === null)
      this.fail(
        'reconnect',
        'it is not an object',
        'Pass { initialDelayMs, maxDelayMs } or leave it out.',
      );
    const initialDelayMs = this.integer(
      reconnect.initialDelayMs,
      500,
      'reconnect.initialDelayMs',
      0,
      600_000,
    );
    const maxDelayMs = this.integer(
      reconnect.maxDelayMs,
      // A first wait above the default maximum raises the maximum with it.
      Math.max(15_000, initialDelayMs),
      'reconnect.maxDelayMs',
      0,
      3_600_000,
    );
    if (maxDelayMs < initialDelayMs) {
      this.fail(
        'reconnect.maxDelayMs',
        `${maxDelayMs} ms is below reconnect.initialDelayMs (${initialDelayMs} ms)`,
        'Raise maxDelayMs or lower initialDelayMs.',
      );
    }
    return { initialDelayMs, maxDelayMs };
  };

  /** The publisher's own `publishTimeoutMs`: how long it waits for the broker's answer. */
  readonly publishTimeout = (value: number | undefined): number =>
    this.integer(value, 5_000, 'publishTimeoutMs', 10, 3_600_000);

  /** The time allowed to open a connection, under the option name the broker's publisher uses. */
  readonly connectTimeout = (
    value: number | undefined,
    option: 'connectionTimeoutMs' | 'connectTimeoutMs',
  ): number => this.integer(value, 5_000, option, 100, 600_000);

  /** The `cloudEvents` option: what `cloudEvents()` of `nestjs-outbox/cloudevents` made, or nothing. */
  readonly cloudEvents = (value: unknown): OutboxCloudEvents | undefined => {
    if (value === undefined) return undefined;
    if (
      typeof value !== 'object' ||
      value === null ||
      typeof (value as { encode?: unknown }).encode !== 'function'
    ) {
      this.fail(
        'cloudEvents',
        `${this.show(value)} is not what cloudEvents() makes`,
        "Pass cloudEvents({ source: '/my-service' }) from nestjs-outbox/cloudevents, or leave it out to send plain outbox messages.",
      );
    }
    return value as OutboxCloudEvents;
  };
}
