import type { OutboxBrokerAttributes } from './outbox-message.interface';
import { natsSubjectProblem } from './nats-subject';

// eslint-disable-next-line no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f]/;
// AMQP short strings (exchange, routing key) are at most 255 bytes.
const MAX_SHORT_STRING_BYTES = 255;
const MAX_INT32 = 2 ** 31 - 1;
// RabbitMQ takes an expiration up to 2^32 - 1 ms (about 49 days) and refuses the message beyond.
const MAX_EXPIRATION_MS = 2 ** 32 - 1;

/** Why an `attributes` value cannot be stored: the path of the bad value and what is wrong. */
export class BrokerAttributesProblem extends Error {
  constructor(
    readonly path: string,
    readonly detail: string,
  ) {
    super(`${path}: ${detail}`);
  }
}

type Check = (value: unknown, path: string) => unknown;

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'string') return `a string of ${value.length} characters`;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (Array.isArray(value)) return 'an array';
  return `a ${typeof value}`;
}

const integer =
  (min: number, max: number): Check =>
  (value, path) => {
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
      throw new BrokerAttributesProblem(
        path,
        `expected a whole number from ${min} to ${max}, got ${describe(value)}`,
      );
    }
    return value;
  };

const shortString: Check = (value, path) => {
  if (
    typeof value !== 'string' ||
    Buffer.byteLength(value, 'utf8') > MAX_SHORT_STRING_BYTES ||
    CONTROL_CHARS.test(value) ||
    /\p{Cs}/u.test(value)
  ) {
    throw new BrokerAttributesProblem(
      path,
      `expected a string of at most ${MAX_SHORT_STRING_BYTES} UTF-8 bytes without control characters, got ${describe(value)}`,
    );
  }
  return value;
};

// Redis keys are binary-safe and up to 512 MB; a stream key a message names is held to what a
// log line, a CLI and another client can show and type.
const MAX_STREAM_KEY_BYTES = 1_024;

const streamKey: Check = (value, path) => {
  if (
    typeof value !== 'string' ||
    value === '' ||
    Buffer.byteLength(value, 'utf8') > MAX_STREAM_KEY_BYTES ||
    CONTROL_CHARS.test(value) ||
    /\p{Cs}/u.test(value)
  ) {
    throw new BrokerAttributesProblem(
      path,
      `expected a stream key of 1 to ${MAX_STREAM_KEY_BYTES} UTF-8 bytes without control characters, got ${describe(value)}`,
    );
  }
  return value;
};

const boolean: Check = (value, path) => {
  if (typeof value !== 'boolean') {
    throw new BrokerAttributesProblem(path, `expected true or false, got ${describe(value)}`);
  }
  return value;
};

const qos: Check = (value, path) => {
  if (value !== 0 && value !== 1 && value !== 2) {
    throw new BrokerAttributesProblem(path, `expected 0, 1 or 2, got ${describe(value)}`);
  }
  return value;
};

const natsSubject: Check = (value, path) => {
  const problem = natsSubjectProblem(value);
  if (problem !== undefined) {
    throw new BrokerAttributesProblem(path, `${problem}, got ${describe(value)}`);
  }
  return value;
};

// SQS and SNS message group ids: 1 to 128 printable ASCII characters.
const groupId: Check = (value, path) => {
  if (typeof value !== 'string' || !/^[\x21-\x7e]{1,128}$/.test(value)) {
    throw new BrokerAttributesProblem(
      path,
      `expected 1 to 128 letters, digits or ASCII punctuation (what SQS and SNS take as a MessageGroupId), got ${describe(value)}`,
    );
  }
  return value;
};

// An SNS Subject: 1 to 100 printable ASCII characters (and spaces), not starting with a space.
const snsSubject: Check = (value, path) => {
  if (typeof value !== 'string' || !/^[\x21-\x7e][\x20-\x7e]{0,99}$/.test(value)) {
    throw new BrokerAttributesProblem(
      path,
      `expected 1 to 100 printable ASCII characters, not starting with a space (what SNS takes as a Subject), got ${describe(value)}`,
    );
  }
  return value;
};

// Every attribute a publisher knows, by broker: anything else is refused, so a misspelt
// attribute fails the enqueue instead of being silently ignored by every publisher.
const SHAPE: Record<string, Record<string, Check>> = {
  rabbitmq: {
    priority: integer(0, 255),
    expiration: integer(0, MAX_EXPIRATION_MS),
    exchange: shortString,
    routingKey: shortString,
  },
  kafka: { partition: integer(0, MAX_INT32) },
  mqtt: { qos, retain: boolean },
  jetstream: { subject: natsSubject },
  redis: { stream: streamKey, maxLen: integer(1, Number.MAX_SAFE_INTEGER) },
  // SQS takes a per-message delay of up to 15 minutes (standard queues only).
  sqs: { delaySeconds: integer(0, 900), messageGroupId: groupId },
  sns: { messageGroupId: groupId, subject: snsSubject },
};

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function unknownKey(path: string, key: string, known: readonly string[]): BrokerAttributesProblem {
  return new BrokerAttributesProblem(
    path,
    `"${key}" is not an attribute here; the known ones are ${known.map((k) => `"${k}"`).join(', ')}`,
  );
}

/**
 * The broker attributes of a message as the JSON text stored with its row, or undefined when it
 * has none (absent, or nothing but undefined values). Throws a BrokerAttributesProblem for any
 * unknown broker, unknown attribute or bad value.
 */
export function brokerAttributesJson(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isPlainObject(value)) {
    throw new BrokerAttributesProblem(
      'attributes',
      `expected an object such as { rabbitmq: { priority: 5 } }, got ${describe(value)}`,
    );
  }
  const out: Record<string, Record<string, unknown>> = {};
  for (const [broker, given] of Object.entries(value)) {
    const shape = SHAPE[broker];
    if (shape === undefined) throw unknownKey('attributes', broker, Object.keys(SHAPE));
    if (given === undefined) continue;
    const path = `attributes.${broker}`;
    if (!isPlainObject(given)) {
      throw new BrokerAttributesProblem(path, `expected an object, got ${describe(given)}`);
    }
    const checked: Record<string, unknown> = {};
    for (const [name, attribute] of Object.entries(given)) {
      const check = shape[name];
      if (check === undefined) throw unknownKey(path, name, Object.keys(shape));
      if (attribute !== undefined) checked[name] = check(attribute, `${path}.${name}`);
    }
    if (Object.keys(checked).length > 0) out[broker] = checked;
  }
  return Object.keys(out).length === 0 ? undefined : JSON.stringify(out);
}

/** The stored attributes text of a row back as an object (null or absent: none). */
export function parseBrokerAttributes(
  text: string | null | undefined,
): OutboxBrokerAttributes | undefined {
  if (text === null || text === undefined || text === '') return undefined;
  return JSON.parse(text) as OutboxBrokerAttributes;
}
