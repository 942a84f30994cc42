import { CloudEvent } from 'cloudevents';
import type { OutboxRecord } from '../../message/outbox-record.interface';
import {
  OptionChecks,
  type KnownOptionKeys,
  type OptionFailure,
} from '../../options/option-checks';
import type { CloudEventsMode } from '../../publishers/cloud-events/outbox-cloud-events.port';

/** Options of {@link cloudEvents}. */
export interface CloudEventsOptions {
  /**
   * The `source` attribute of every event: a URI-reference naming the producer, e.g.
   * `'https://orders.example.com'`, `'urn:example:orders'` or `'/orders-service'`.
   */
  source: string;
  /**
   * The content mode of every event type not listed in `types`: `'binary'` (attributes as
   * message metadata, the payload as the body) or `'structured'` (the whole event as a JSON
   * body); `false` sends those types as plain outbox messages.
   * @default 'binary'
   */
  mode?: CloudEventsMode | false;
  /** Per event type: its content mode, or `false` to send it as a plain outbox message. @default {} */
  types?: Readonly<Record<string, CloudEventsMode | false>>;
  /**
   * The `subject` attribute of a message; undefined leaves it out.
   * @default the message's key (none on a keyless message)
   */
  subject?: (record: OutboxRecord) => string | undefined;
}

/** Options with defaults applied and values checked. */
export interface ResolvedCloudEventsOptions {
  readonly source: string;
  readonly mode: CloudEventsMode | false;
  readonly types: ReadonlyMap<string, CloudEventsMode | false>;
  readonly subject: (record: OutboxRecord) => string | undefined;
}

const OPTION_KEYS = {
  '': { source: true, mode: true, types: true, subject: true } satisfies Record<
    keyof CloudEventsOptions,
    true
  >,
} satisfies KnownOptionKeys;

const MODES: readonly unknown[] = ['binary', 'structured', false];
const checks: OptionChecks = new OptionChecks('cloudEvents');
const fail: OptionFailure = checks.fail;
const { show } = checks;

function checkMode(value: unknown, option: string): CloudEventsMode | false {
  if (!MODES.includes(value)) {
    fail(
      option,
      `${show(value)} is not a content mode`,
      "Use 'binary' (attributes as message metadata), 'structured' (the event as a JSON body) or false (a plain outbox message).",
    );
  }
  return value as CloudEventsMode | false;
}

/** Checks the source the way each event is checked, by the SDK's own schema, once. */
function checkSource(source: unknown): string {
  if (typeof source !== 'string' || source.trim() === '') {
    fail(
      'source',
      `${show(source)} is not a non-empty string`,
      "Name the producer with a URI-reference, e.g. 'https://orders.example.com' or '/orders-service'.",
    );
  }
  try {
    new CloudEvent({ id: 'probe', type: 'probe', source });
  } catch {
    fail(
      'source',
      `${show(source)} is not a URI-reference`,
      "Use e.g. 'https://orders.example.com', 'urn:example:orders' or '/orders-service' (no spaces).",
    );
  }
  return source;
}

/**
 * Merges the defaults into `cloudEvents()` options and rejects bad ones with an
 * `OutboxOptionsError` that says how to fix them.
 */
export function resolveCloudEventsOptions(options: CloudEventsOptions): ResolvedCloudEventsOptions {
  if (options === null || typeof options !== 'object') {
    fail('options', `${show(options)} is not an object`, "Pass { source: '/orders-service' }.");
  }
  checks.knownKeys(options, OPTION_KEYS);
  const source = checkSource(options.source);
  const mode = checkMode(options.mode ?? 'binary', 'mode');
  const types = new Map<string, CloudEventsMode | false>();
  const given: unknown = options.types ?? {};
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    fail(
      'types',
      'it is not an object of event types',
      "Pass e.g. { 'order.created': 'structured', 'audit.note': false }.",
    );
  }
  for (const [type, value] of Object.entries(given)) {
    if (type === '') fail('types', 'an event type is empty', 'Name each type as it is enqueued.');
    types.set(type, checkMode(value, `types.${type}`));
  }
  if (options.subject !== undefined && typeof options.subject !== 'function') {
    fail(
      'subject',
      'it is not a function',
      'Pass (record) => subject or undefined, or leave it out for the message key.',
    );
  }
  return {
    source,
    mode,
    types,
    subject: options.subject ?? ((record) => record.key ?? undefined),
  };
}
