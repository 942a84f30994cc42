import type { KnownOptionKeys } from '../../options/option-checks';
import type { OutboxCloudEvents } from '../cloud-events/outbox-cloud-events.port';
import type { PublisherOptionChecks } from '../kit/publisher-options-check';
import type { OutboxMessageDraft } from '../outbox-publisher.interface';

// The options SQS and SNS publishers share, checked once for both. Typed structurally, so that
// this folder loads no AWS package.

/** What SQS and SNS take at most in one message (and one batch call): 1 MiB; 256 KiB by default. */
export const AWS_DEFAULT_MAX_MESSAGE_BYTES = 262_144;
export const AWS_MAX_MESSAGE_BYTES = 1_048_576;

/** The keys of the options both publishers take, beside their destination and ping options. */
export const AWS_OPTION_KEYS = {
  client: true,
  maxConcurrentRequests: true,
  maxMessageBytes: true,
  cloudEvents: true,
} as const;

/** The user's client, or the configuration of the one the publisher builds and owns. */
export interface AwsClientOption<C, Config> {
  /** The client given, or undefined when the publisher builds its own from `clientConfig`. */
  readonly client: C | undefined;
  readonly clientConfig: Config;
}

/** The options of an SQS or SNS publisher besides its destinations, resolved. */
export interface ResolvedAwsSharedOptions<C, Config> extends AwsClientOption<C, Config> {
  readonly maxConcurrentRequests: number;
  readonly maxMessageBytes: number;
  /** What makes each message a CloudEvent; undefined sends plain outbox messages. */
  readonly cloudEvents: OutboxCloudEvents | undefined;
}

/** The options of an SQS or SNS publisher, resolved, the destination under the kit's names. */
export interface ResolvedAwsPublisherOptions<C, Config> extends ResolvedAwsSharedOptions<
  C,
  Config
> {
  /** Where a message goes (a queue name or URL, a topic ARN). */
  readonly route: (message: OutboxMessageDraft) => string;
  /** The one destination every message goes to, when the option is a string. */
  readonly fixed: string | undefined;
  /** The destination `ping()` asks about. */
  readonly ping: string | undefined;
}

/** How one service's publisher names and checks its options. */
export interface AwsServiceOptions {
  /** 'SQS' gives `SQSClient` in messages. */
  readonly service: 'SQS' | 'SNS';
  /** The option naming where a message goes (`queue`, `topicArn`), and the ping's. */
  readonly destination: string;
  readonly ping: string;
  /** Options to pass, for the message about a value that is not an object. */
  readonly example: string;
  readonly keys: KnownOptionKeys;
  /** Whether a value is one of the service's destinations (a queue name or URL, a topic ARN). */
  isDestination(value: unknown): boolean;
  /** What a value that is none is not, after the value: `is not an SNS topic ARN`. */
  readonly notADestination: string;
  /** How to give one, as a sentence. */
  readonly fix: string;
}

/**
 * Merges the defaults into the options of an SQS or SNS publisher and rejects invalid ones with
 * a message that says how to fix them. Pure: no I/O, nothing of the client configuration echoed.
 */
export function resolveAwsPublisherOptions<C extends object, Config extends object>(
  checks: PublisherOptionChecks,
  options: object,
  names: AwsServiceOptions,
): ResolvedAwsPublisherOptions<C, Config | Record<string, never>> {
  checks.optionsObject(options, names.example);
  checks.knownKeys(options, names.keys);
  const given = options as Readonly<Record<string, unknown>>;
  const { client, clientConfig } = resolveClient<C, Config>(checks, given.client, names.service);
  const check = (option: string, value: unknown): void => {
    if (!names.isDestination(value)) {
      checks.fail(option, `${checks.show(value)} ${names.notADestination}`, names.fix);
    }
  };
  const destination = given[names.destination];
  if (destination !== undefined && typeof destination !== 'function') {
    check(names.destination, destination);
  }
  const ping = given[names.ping];
  if (ping !== undefined) check(names.ping, ping);
  const fixed = typeof destination === 'string' ? destination : undefined;
  return {
    client,
    clientConfig,
    route:
      typeof destination === 'function'
        ? (destination as (message: OutboxMessageDraft) => string)
        : fixed !== undefined
          ? () => fixed
          : (message) => message.topic,
    fixed,
    ping: ping as string | undefined,
    maxConcurrentRequests: checks.integer(
      given.maxConcurrentRequests,
      10,
      'maxConcurrentRequests',
      1,
      1_000,
    ),
    maxMessageBytes: checks.integer(
      given.maxMessageBytes,
      AWS_DEFAULT_MAX_MESSAGE_BYTES,
      'maxMessageBytes',
      1_024,
      AWS_MAX_MESSAGE_BYTES,
      ' bytes',
    ),
    cloudEvents: checks.cloudEvents(given.cloudEvents),
  };
}

/** The `client` option: a client (anything with `send`) or its configuration. */
function resolveClient<C extends object, Config extends object>(
  checks: PublisherOptionChecks,
  client: unknown,
  service: 'SQS' | 'SNS',
): AwsClientOption<C, Config | Record<string, never>> {
  if (client === undefined) return { client: undefined, clientConfig: {} };
  // Never echo the value: a configuration may hold credentials.
  if (client === null || typeof client !== 'object') {
    checks.fail(
      'client',
      `it is neither an ${service}Client nor an ${service}ClientConfig object`,
      `Pass new ${service}Client({ region: 'eu-west-1' }), or its configuration, or leave it out.`,
    );
  }
  if (typeof (client as { send?: unknown }).send === 'function') {
    return { client: client as C, clientConfig: {} };
  }
  return { client: undefined, clientConfig: client as Config };
}
