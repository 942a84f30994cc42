import { createHash } from 'node:crypto';
import { getOutboxEventMetadata } from './outbox-event.decorator';
import {
  OutboxInvalidMessageError,
  type OutboxInvalidMessageReason,
} from '../errors/outbox-invalid-message.error';
import type { EnqueueOptions, OutboxMessage } from './outbox-message.interface';
import type { NewOutboxRow } from './new-outbox-row';
import type { OutboxEventPersonalData, ResolvedPersonalData } from './erasure/personal-data';
import { OUTBOX_HEADER_PREFIX, REDRIVE_LANE_PREFIX } from '../outbox.constants';
import { OutboxMessages } from '../outbox.messages';
import { describeError } from '../internal/describe-error';
import { suggestOption } from '../internal/did-you-mean';
import { PERSONAL_DATA_KEYS } from './outbox-event-option-keys';
import { UuidV7Generator } from './uuidv7';
import { BrokerAttributesProblem, brokerAttributesJson } from './broker-attributes';

const MAX_NAME = 255;
const MAX_HEADER_VALUE = 8_192;
const MAX_HEADERS = 64;
/** The longest tenant id: the `tenant_id` column's width. */
export const MAX_TENANT_LENGTH = 128;
// CC and BCC are RabbitMQ sender-selected distribution headers: a user value would reroute
// the message to other queues.
const RESERVED_HEADERS = new Set(['cc', 'bcc']);

/**
 * Why a header name cannot be enqueued, for a message's own headers and `headersProvider`'s
 * alike: `reserved`, the module's `x-outbox-*` and RabbitMQ's CC/BCC (they reroute messages);
 * `prototype`, `__proto__`, which survives JSON as an own property but is lost wherever headers
 * are copied into an object by assignment (it sets the prototype instead).
 */
export function refusedHeaderName(name: string): 'reserved' | 'prototype' | undefined {
  const lower = name.toLowerCase();
  if (RESERVED_HEADERS.has(lower) || lower.startsWith(OUTBOX_HEADER_PREFIX)) return 'reserved';
  return name === '__proto__' ? 'prototype' : undefined;
}
// eslint-disable-next-line no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f]/;

// PostgreSQL `text` cannot hold U+0000 and its `json` type stores the \u0000 escape but cannot
// read it back (->> fails); a lone surrogate reaches any database or broker as U+FFFD. Both are
// rejected on every database, so that a message means the same wherever it is stored.
// eslint-disable-next-line no-control-regex
const UNPORTABLE_TEXT = /\u0000|\p{Cs}/u;
const NUL_PROBLEM =
  'contains a NUL character (\\u0000), which PostgreSQL cannot store; it is rejected on every ' +
  'database so that messages stay portable';
const SURROGATE_PROBLEM =
  'contains a lone surrogate (half of a UTF-16 pair, as left by cutting a string inside an ' +
  'emoji), which would be stored as U+FFFD';
// 1970-01-01 to 9999-12-31 UTC: a later date does not fit MariaDB's DATETIME and sorts before
// today as SQLite text (+010000-…), so it would be published at once instead of never.
const MIN_AVAILABLE_AT = Date.UTC(1970, 0, 1);
const MAX_AVAILABLE_AT = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
const MAX_DELAY_MS = 3_650 * 86_400_000;

function textProblem(text: string): string | undefined {
  if (!UNPORTABLE_TEXT.test(text)) return undefined;
  return text.includes('\u0000') ? NUL_PROBLEM : SURROGATE_PROBLEM;
}

// Why a payload cannot be stored as it is; `unportable` marks text that JSON could hold.
class PayloadProblem extends Error {
  constructor(
    readonly detail: string,
    readonly path: string,
    readonly unportable = false,
  ) {
    super(detail);
  }
}

function childPath(parent: string, holder: unknown, key: string): string {
  if (Array.isArray(holder)) return `${parent}[${key}]`;
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${parent}.${key}` : `${parent}[${JSON.stringify(key)}]`;
}

// Objects JSON.stringify turns into {} or a map of indices, silently losing their content.
function objectProblem(value: object): string | undefined {
  if (Array.isArray(value)) return undefined;
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto === Object.prototype || proto === null) return undefined;
  if (value instanceof Map) {
    return 'is a Map, which JSON would store as {}: convert it, e.g. with Object.fromEntries(map)';
  }
  if (value instanceof Set)
    return 'is a Set, which JSON would store as {}: convert it, e.g. with [...set]';
  if (
    value instanceof WeakMap ||
    value instanceof WeakSet ||
    value instanceof WeakRef ||
    value instanceof Promise ||
    value instanceof RegExp ||
    value instanceof Error
  ) {
    return `is a ${value.constructor.name}, which JSON would store as {}`;
  }
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) {
    return `is a ${value.constructor.name}, which JSON would not store as its bytes: give the message a contentType to enqueue the bytes as they are (a Buffer or Uint8Array payload), or convert it to an array or a base64 string`;
  }
  if (value instanceof Number && !Number.isFinite(value.valueOf())) {
    return `is ${String(value)}, which JSON would store as null`;
  }
  // Other class instances are stored as their own enumerable properties, like the event itself.
  return undefined;
}

// JSON text of a payload, exactly as the consumer will read it back. Throws a PayloadProblem
// naming the path of the first value JSON would drop or turn into null or {}, or that a database
// cannot store. Objects with toJSON() (Date, Buffer) are stored as what it returns.
function payloadJson(payload: unknown): string {
  // JSON.stringify writes a NUL and a lone surrogate (in a value or a property name) as a \u
  // escape, so JSON text without one needs no regular expression run over each string (0.26 µs
  // of an event's 2.7 µs for 1 KiB of text, more as text grows). Text with one (a control
  // character, an escaped backslash before a u) and any payload refused are looked at again,
  // string by string, so that the problem reported is the first in the payload, as before.
  let json: string;
  try {
    json = checkedJson(payload, false);
  } catch (error) {
    checkedJson(payload, true);
    throw error;
  }
  if (json.includes('\\u')) checkedJson(payload, true);
  return json;
}

function checkedJson(payload: unknown, checkText: boolean): string {
  // Path of every object being serialised, keyed by the object: the replacer only sees the
  // holder of each value, not where that holder sits.
  const paths = new Map<unknown, string>();
  let root = true;
  let lastPath = 'payload';
  // Built only for objects and failures: most values are neither.
  const pathOf = (holder: unknown, key: string, atRoot: boolean): string =>
    atRoot ? 'payload' : childPath(paths.get(holder) ?? 'payload', holder, key);
  const replacer = function (this: unknown, key: string, value: unknown): unknown {
    const atRoot = root;
    root = false;
    if (checkText && !atRoot && !Array.isArray(this)) {
      const problem = textProblem(key);
      if (problem !== undefined) {
        throw new PayloadProblem(
          `has a property name that ${problem}`,
          pathOf(this, key, atRoot),
          true,
        );
      }
    }
    switch (typeof value) {
      case 'string': {
        const problem = checkText ? textProblem(value) : undefined;
        if (problem !== undefined)
          throw new PayloadProblem(problem, pathOf(this, key, atRoot), true);
        return value;
      }
      case 'number':
        if (!Number.isFinite(value)) {
          throw new PayloadProblem(
            `is ${String(value)}, which JSON would store as null`,
            pathOf(this, key, atRoot),
          );
        }
        return value;
      case 'undefined':
        throw new PayloadProblem(
          atRoot
            ? 'is undefined'
            : Array.isArray(this)
              ? 'is undefined, which JSON would store as null: use null, or leave the element out'
              : 'is undefined, which JSON would drop: use null, or leave the property out',
          pathOf(this, key, atRoot),
        );
      case 'function':
        throw new PayloadProblem('is a function', pathOf(this, key, atRoot));
      case 'symbol':
        throw new PayloadProblem('is a symbol', pathOf(this, key, atRoot));
      case 'bigint':
        throw new PayloadProblem('is a BigInt: convert it to a string', pathOf(this, key, atRoot));
      case 'object': {
        if (value === null) {
          // toJSON() of an invalid Date returns null: look at what the holder really had.
          const original: unknown = (this as Record<string, unknown>)[key];
          if (original instanceof Date) {
            throw new PayloadProblem(
              'is an invalid Date, which JSON would store as null',
              pathOf(this, key, atRoot),
            );
          }
          return value;
        }
        const problem = objectProblem(value);
        if (problem !== undefined) throw new PayloadProblem(problem, pathOf(this, key, atRoot));
        lastPath = pathOf(this, key, atRoot);
        paths.set(value, lastPath);
        return value;
      }
      default:
        return value;
    }
  };
  try {
    return JSON.stringify(payload, replacer);
  } catch (error) {
    if (error instanceof PayloadProblem) throw error;
    // The cycle check runs after the replacer has seen the value that closes the circle.
    if (error instanceof TypeError && /circular/i.test(error.message)) {
      throw new PayloadProblem(
        'refers back to an object that contains it (a circular reference)',
        lastPath,
      );
    }
    throw error;
  }
}

// What JSON.stringify makes of an already validated payload; only what no row could hold is
// refused (nothing at all, or a value JSON cannot write).
function uncheckedJson(payload: unknown): string {
  const json: unknown = JSON.stringify(payload);
  if (typeof json !== 'string') {
    throw new PayloadProblem(`is ${describeValue(payload)}, which JSON cannot store`, 'payload');
  }
  return json;
}

type Invalid = (message: string, reason: OutboxInvalidMessageReason, cause?: unknown) => Error;

// Says what a bad value was without echoing its content: keys and header values may carry
// personal data or tokens, and this text ends up in logs.
function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (value instanceof Date) {
    return Number.isNaN(value.getTime()) ? 'an invalid Date' : value.toISOString();
  }
  switch (typeof value) {
    case 'string':
      return value === '' ? 'an empty string' : `a string of ${value.length} characters`;
    case 'number':
      return String(value);
    case 'object':
      return Array.isArray(value)
        ? 'an array'
        : `an object (${value.constructor?.name ?? 'Object'})`;
    default:
      return `a ${typeof value}`;
  }
}

// Topic, type and header names are routing data, not personal data: quoting them helps.
function nameProblem(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.trim() === '' || value.length > MAX_NAME) {
    return `expected a non-empty string of at most ${MAX_NAME} characters, got ${describeValue(value)}`;
  }
  const text = textProblem(value);
  if (text !== undefined) return `${JSON.stringify(value)} ${text}`;
  const control = CONTROL_CHARS.exec(value);
  if (control !== null) {
    const code = control[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, '0');
    return `${JSON.stringify(value)} contains the control character U+${code}`;
  }
  return undefined;
}

const MESSAGE_FIELDS = {
  topic: true,
  payload: true,
  type: true,
  key: true,
  headers: true,
  messageId: true,
  dedupeKey: true,
  availableAt: true,
  delayMs: true,
  validatePayload: true,
  contentType: true,
  attributes: true,
  tenant: true,
  personal: true,
} satisfies Record<keyof OutboxMessage, true>;

function isPlainObject(value: object): boolean {
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** Which required field a plain message lacks, with the field it likely meant. */
function plainMessageProblem(value: object): string {
  const missing = (['topic', 'payload'] as const).filter((f) => !(f in value));
  const hints = Object.keys(value)
    .filter((k) => !Object.hasOwn(MESSAGE_FIELDS, k))
    .flatMap((k) => {
      const near = suggestOption('', k, { '': MESSAGE_FIELDS });
      return near === undefined ? [] : [`"${k}": did you mean "${near}"?`];
    });
  return `it has no ${missing.map((f) => `"${f}"`).join(' and no ')}${hints.length > 0 ? ` (${hints.join('; ')})` : ''}`;
}

function isPlainMessage(value: object): value is OutboxMessage {
  return 'topic' in value && 'payload' in value && getOutboxEventMetadata(value) === undefined;
}

/** The personal data of an event, from its `@OutboxEvent({ personal })`. */
function personalOfEvent(
  personal: OutboxEventPersonalData,
  event: object,
  className: string,
  invalid: Invalid,
): unknown {
  let subject: unknown;
  try {
    subject =
      typeof personal.subject === 'function'
        ? personal.subject(event)
        : (event as Record<string, unknown>)[personal.subject];
  } catch (error) {
    throw invalid(
      OutboxMessages.invalidField(
        'personal.subject',
        `the subject function of @OutboxEvent() on ${className} threw ${describeError(error)}`,
      ),
      'invalid-personal',
      error,
    );
  }
  return { subject, fields: personal.fields };
}

const PERSONAL_KEYS = { '': PERSONAL_DATA_KEYS } as const;

/** A message's personal data, checked: a subject, and the fields to seal (null: all of it). */
function checkedPersonal(
  personal: unknown,
  contentType: unknown,
  invalid: Invalid,
): ResolvedPersonalData {
  const refuse = (problem: string): never => {
    throw invalid(OutboxMessages.invalidField('personal', problem), 'invalid-personal');
  };
  if (personal === null || typeof personal !== 'object') {
    return refuse(`expected { subject, fields? }, got ${describeValue(personal)}`);
  }
  // A misspelt key must not pass: without `fields` the whole payload is sealed.
  for (const key in personal) {
    if (Object.hasOwn(PERSONAL_DATA_KEYS, key)) continue;
    const meant = suggestOption('', key, PERSONAL_KEYS);
    return refuse(
      `${key} is not a key of it${meant === undefined ? '' : `; did you mean ${meant}?`} Expected { subject, fields? }`,
    );
  }
  const { subject, fields } = personal as { subject?: unknown; fields?: unknown };
  if (typeof subject !== 'string' || subject === '' || subject.length > MAX_NAME) {
    return refuse(
      `expected subject to be a non-empty string of at most ${MAX_NAME} characters, got ${describeValue(subject)}`,
    );
  }
  if (contentType !== undefined) {
    return refuse('personal data is sealed in JSON payloads only, not in a binary one');
  }
  if (fields === undefined) return { subject, fields: null };
  if (
    !Array.isArray(fields) ||
    fields.length === 0 ||
    fields.some((f) => typeof f !== 'string' || f === '')
  ) {
    return refuse(
      `expected fields to be a non-empty list of top-level field names, got ${describeValue(fields)}`,
    );
  }
  return { subject, fields: [...new Set(fields as string[])] };
}

/** Turns events and plain messages into validated rows; nothing invalid gets through. */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A UUIDv8 from SHA-256 of the dedupe key: stable across processes and releases. */
export function uuidFromDedupeKey(dedupeKey: string): string {
  const bytes = createHash('sha256').update(`nestjs-outbox:${dedupeKey}`).digest().subarray(0, 16);
  bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x80;
  bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * A tenant id as stored in `tenant_id`: a non-empty string of at most 128 characters that every
 * database and broker header can hold. Throws what `invalid` makes of the problem otherwise.
 */
export function checkedTenant(tenant: unknown, invalid: (problem: string) => Error): string {
  if (typeof tenant !== 'string' || tenant === '' || tenant.length > MAX_TENANT_LENGTH) {
    throw invalid(
      `expected a non-empty string of at most ${MAX_TENANT_LENGTH} characters, got ${describeValue(tenant)}`,
    );
  }
  const problem =
    textProblem(tenant) ??
    (CONTROL_CHARS.test(tenant) ? 'contains a control character' : undefined);
  if (problem !== undefined) throw invalid(`it ${problem}`);
  return tenant;
}

export class OutboxMessageSerializer {
  private readonly ids = new UuidV7Generator();

  constructor(private readonly maxPayloadBytes: number) {}

  toRow(input: object, index: number, options?: EnqueueOptions): NewOutboxRow {
    const invalid: Invalid = (message, reason, cause) =>
      new OutboxInvalidMessageError(message, reason, index, { cause });
    if (input === null || typeof input !== 'object') {
      throw invalid(
        OutboxMessages.invalidField('input', 'expected an event instance or a message object'),
        'missing-metadata',
      );
    }

    let topic: unknown, type: unknown, key: unknown, headers: unknown, payload: unknown;
    let messageId: unknown, dedupeKey: unknown, contentType: unknown, attributes: unknown;
    let tenant: unknown;
    let personal: unknown;
    let validatePayload: unknown = true;
    let availableAt: unknown = options?.availableAt;
    let delayMs: unknown = options?.delayMs;
    if (isPlainMessage(input)) {
      ({ topic, key, headers, payload, messageId, dedupeKey, contentType, attributes, tenant } =
        input);
      personal = input.personal;
      validatePayload = input.validatePayload ?? true;
      type = input.type ?? input.topic;
      availableAt = input.availableAt ?? availableAt;
      delayMs = input.delayMs ?? delayMs;
    } else {
      const meta = getOutboxEventMetadata(input);
      const className = input.constructor?.name ?? 'Object';
      if (meta === undefined) {
        // A plain object is a message with a field missing (or misspelt), not an event class.
        if (isPlainObject(input)) {
          throw invalid(
            OutboxMessages.incompleteMessage(plainMessageProblem(input)),
            'invalid-topic',
          );
        }
        throw invalid(OutboxMessages.missingEventMetadata(className), 'missing-metadata');
      }
      topic = meta.topic;
      type = meta.type;
      payload = input;
      validatePayload = meta.validatePayload ?? true;
      // The key and headers functions are user code run inside enqueue(): what they throw is
      // bad input of this message, and must fail the call like any other.
      try {
        if (typeof meta.key === 'function') key = meta.key(input);
        else if (typeof meta.key === 'string') key = (input as Record<string, unknown>)[meta.key];
        if (typeof meta.dedupeKey === 'function') dedupeKey = meta.dedupeKey(input);
        else if (typeof meta.dedupeKey === 'string')
          dedupeKey = (input as Record<string, unknown>)[meta.dedupeKey];
      } catch (error) {
        throw invalid(
          OutboxMessages.invalidField(
            'key',
            `the key of @OutboxEvent() on ${className} threw ${describeError(error)}`,
          ),
          'invalid-key',
          error,
        );
      }
      try {
        if (typeof meta.tenant === 'function') tenant = meta.tenant(input);
        else if (typeof meta.tenant === 'string')
          tenant = (input as Record<string, unknown>)[meta.tenant];
      } catch (error) {
        throw invalid(
          OutboxMessages.invalidField(
            'tenant',
            `the tenant function of @OutboxEvent() on ${className} threw ${describeError(error)}`,
          ),
          'invalid-tenant',
          error,
        );
      }
      if (meta.personal !== undefined)
        personal = personalOfEvent(meta.personal, input, className, invalid);
      try {
        attributes =
          typeof meta.attributes === 'function' ? meta.attributes(input) : meta.attributes;
      } catch (error) {
        throw invalid(
          OutboxMessages.invalidField(
            'attributes',
            `the attributes function of @OutboxEvent() on ${className} threw ${describeError(error)}`,
          ),
          'invalid-attributes',
          error,
        );
      }
      if (meta.contentType !== undefined || meta.encode !== undefined) {
        if (meta.contentType === undefined || typeof meta.encode !== 'function') {
          throw invalid(
            OutboxMessages.invalidField(
              'contentType',
              `@OutboxEvent() on ${className} needs both contentType and encode to make a binary event`,
            ),
            'invalid-content-type',
          );
        }
        contentType = meta.contentType;
        try {
          payload = meta.encode(input);
        } catch (error) {
          throw invalid(
            OutboxMessages.notSerialisable(
              `the encode function of @OutboxEvent() on ${className} threw ${describeError(error)}`,
            ),
            'not-serialisable',
            error,
          );
        }
      }
      try {
        headers = typeof meta.headers === 'function' ? meta.headers(input) : meta.headers;
      } catch (error) {
        throw invalid(
          OutboxMessages.invalidField(
            'headers',
            `the headers function of @OutboxEvent() on ${className} threw ${describeError(error)}`,
          ),
          'invalid-header',
          error,
        );
      }
    }

    const topicProblem = nameProblem(topic);
    if (topicProblem !== undefined) {
      throw invalid(OutboxMessages.invalidField('topic', topicProblem), 'invalid-topic');
    }
    const typeProblem = nameProblem(type);
    if (typeProblem !== undefined) {
      throw invalid(OutboxMessages.invalidField('type', typeProblem), 'invalid-type');
    }
    if (typeof validatePayload !== 'boolean') {
      throw invalid(
        OutboxMessages.invalidField(
          'validatePayload',
          `expected true or false, got ${describeValue(validatePayload)}`,
        ),
        'not-serialisable',
      );
    }
    const supplied = this.suppliedId(messageId, dedupeKey, invalid);
    const sealed =
      personal === undefined ? {} : { personal: checkedPersonal(personal, contentType, invalid) };
    // The JSON path builds the row as it did before binary payloads existed: nothing more.
    if (contentType === undefined && attributes === undefined && tenant === undefined) {
      return {
        ...sealed,
        messageId: supplied ?? this.ids.next(),
        idempotent: supplied !== undefined,
        topic: topic as string,
        key: this.key(key, invalid),
        type: type as string,
        payload: this.serialise(payload, validatePayload, invalid),
        headers: this.headers(headers, invalid),
        ...this.schedule(availableAt, delayMs, invalid),
      };
    }
    return {
      ...sealed,
      messageId: supplied ?? this.ids.next(),
      idempotent: supplied !== undefined,
      topic: topic as string,
      key: this.key(key, invalid),
      type: type as string,
      payload:
        contentType === undefined ? this.serialise(payload, validatePayload, invalid) : 'null',
      headers: this.headers(headers, invalid),
      ...this.schedule(availableAt, delayMs, invalid),
      ...(contentType === undefined ? {} : { binary: this.binary(payload, contentType, invalid) }),
      ...this.attributes(attributes, invalid),
      ...(tenant === undefined
        ? {}
        : {
            tenant: checkedTenant(tenant, (problem) =>
              invalid(OutboxMessages.invalidField('tenant', problem), 'invalid-tenant'),
            ),
          }),
    };
  }

  /** The bytes of a binary message, copied so that a later change by the caller cannot alter them. */
  private binary(
    payload: unknown,
    contentType: unknown,
    invalid: Invalid,
  ): { bytes: Buffer; contentType: string } {
    const problem = nameProblem(contentType);
    if (problem !== undefined || !(contentType as string).includes('/')) {
      throw invalid(
        OutboxMessages.invalidField(
          'contentType',
          problem ??
            `expected a media type such as "application/avro" (type/subtype), got ${JSON.stringify(contentType)}`,
        ),
        'invalid-content-type',
      );
    }
    if (!(payload instanceof Uint8Array)) {
      throw invalid(
        OutboxMessages.invalidField(
          'payload',
          `a message with a contentType carries bytes: expected a Buffer or Uint8Array, got ${describeValue(payload)}`,
        ),
        'not-serialisable',
      );
    }
    if (payload.byteLength > this.maxPayloadBytes) {
      throw invalid(
        OutboxMessages.payloadTooLarge(payload.byteLength, this.maxPayloadBytes),
        'payload-too-large',
      );
    }
    return { bytes: Buffer.from(payload), contentType: contentType as string };
  }

  private attributes(attributes: unknown, invalid: Invalid): { attributes?: string } {
    try {
      const json = brokerAttributesJson(attributes);
      return json === undefined ? {} : { attributes: json };
    } catch (error) {
      if (error instanceof BrokerAttributesProblem) {
        throw invalid(OutboxMessages.invalidField(error.path, error.detail), 'invalid-attributes');
      }
      throw error;
    }
  }

  /**
   * The caller's message id, or one derived from its dedupe key: the same business operation
   * retried in a new transaction then maps to the same row, which the insert skips.
   */
  private suppliedId(messageId: unknown, dedupeKey: unknown, invalid: Invalid): string | undefined {
    if (messageId !== undefined && dedupeKey !== undefined) {
      throw invalid(
        OutboxMessages.invalidField('messageId', 'give either messageId or dedupeKey, not both'),
        'invalid-message-id',
      );
    }
    if (messageId !== undefined) {
      if (typeof messageId !== 'string' || !UUID.test(messageId)) {
        throw invalid(
          OutboxMessages.invalidField(
            'messageId',
            `expected a UUID (8-4-4-4-12 hex digits), got ${describeValue(messageId)}`,
          ),
          'invalid-message-id',
        );
      }
      return messageId.toLowerCase();
    }
    if (dedupeKey === undefined) return undefined;
    if (typeof dedupeKey !== 'string' || dedupeKey === '' || dedupeKey.length > MAX_NAME) {
      throw invalid(
        OutboxMessages.invalidField(
          'dedupeKey',
          `expected a non-empty string of at most ${MAX_NAME} characters, got ${describeValue(dedupeKey)}`,
        ),
        'invalid-message-id',
      );
    }
    const problem = textProblem(dedupeKey);
    if (problem !== undefined) {
      throw invalid(
        OutboxMessages.invalidField('dedupeKey', `it ${problem}`),
        'invalid-message-id',
      );
    }
    return uuidFromDedupeKey(dedupeKey);
  }

  private key(key: unknown, invalid: Invalid): string | null {
    if (key === undefined || key === null) return null;
    if (typeof key === 'number' && Number.isFinite(key)) return String(key);
    if (typeof key !== 'string' || key === '' || key.length > MAX_NAME) {
      throw invalid(
        OutboxMessages.invalidField(
          'key',
          `expected a non-empty string of at most ${MAX_NAME} characters, a finite number or null, got ${describeValue(key)}`,
        ),
        'invalid-key',
      );
    }
    const problem =
      textProblem(key) ??
      (key.startsWith(REDRIVE_LANE_PREFIX)
        ? 'begins as the outbox marks its re-drive lanes (U+0001 "redrive-lane:")'
        : undefined);
    if (problem !== undefined) {
      throw invalid(OutboxMessages.invalidField('key', `it ${problem}`), 'invalid-key');
    }
    return key;
  }

  private serialise(payload: unknown, validate: boolean, invalid: Invalid): string {
    let json: string;
    try {
      json = validate ? payloadJson(payload) : uncheckedJson(payload);
    } catch (error) {
      if (error instanceof PayloadProblem) {
        throw invalid(
          error.unportable
            ? OutboxMessages.invalidField(error.path, `it ${error.detail}`)
            : OutboxMessages.notSerialisable(`${error.path} ${error.detail}`),
          'not-serialisable',
        );
      }
      throw invalid(
        OutboxMessages.notSerialisable(`serialising it threw ${describeError(error)}`),
        'not-serialisable',
        error,
      );
    }
    // UTF-8 length is at most 3 bytes per UTF-16 unit: skip the exact count for small payloads.
    if (json.length * 3 > this.maxPayloadBytes) {
      const bytes = Buffer.byteLength(json, 'utf8');
      if (bytes > this.maxPayloadBytes) {
        throw invalid(
          OutboxMessages.payloadTooLarge(bytes, this.maxPayloadBytes),
          'payload-too-large',
        );
      }
    }
    return json;
  }

  private headers(headers: unknown, invalid: Invalid): string {
    if (headers === undefined || headers === null) return '{}';
    if (typeof headers !== 'object' || Array.isArray(headers)) {
      throw invalid(
        OutboxMessages.invalidField('headers', 'expected an object of string values'),
        'invalid-header',
      );
    }
    const entries = Object.entries(headers);
    if (entries.length > MAX_HEADERS) {
      throw invalid(
        OutboxMessages.invalidField('headers', `more than ${MAX_HEADERS} headers`),
        'invalid-header',
      );
    }
    for (const [name, value] of entries) {
      const refused = refusedHeaderName(name);
      if (refused === 'reserved') {
        throw invalid(OutboxMessages.reservedHeader(name), 'reserved-header');
      }
      const problem =
        refused === 'prototype'
          ? 'JavaScript objects take it for their prototype, so brokers and consumers would lose it; use another name'
          : nameProblem(name);
      if (problem !== undefined) {
        throw invalid(
          OutboxMessages.invalidField(`header name ${JSON.stringify(name)}`, problem),
          'invalid-header',
        );
      }
      if (typeof value !== 'string' || value.length > MAX_HEADER_VALUE) {
        throw invalid(
          OutboxMessages.invalidField(
            `header "${name}"`,
            `expected a string of at most ${MAX_HEADER_VALUE} characters, got ${describeValue(value)}`,
          ),
          'invalid-header',
        );
      }
      const valueProblem = textProblem(value);
      if (valueProblem !== undefined) {
        throw invalid(
          OutboxMessages.invalidField(`header "${name}"`, `its value ${valueProblem}`),
          'invalid-header',
        );
      }
    }
    return entries.length === 0 ? '{}' : JSON.stringify(headers);
  }

  private schedule(
    availableAt: unknown,
    delayMs: unknown,
    invalid: Invalid,
  ): { availableAt: Date | null; delayMs: number | null } {
    if (availableAt !== undefined && availableAt !== null) {
      const time = availableAt instanceof Date ? availableAt.getTime() : Number.NaN;
      if (!(time >= MIN_AVAILABLE_AT && time <= MAX_AVAILABLE_AT)) {
        throw invalid(
          OutboxMessages.invalidField(
            'availableAt',
            `expected a valid Date from 1970-01-01 to 9999-12-31 (UTC), got ${describeValue(availableAt)}`,
          ),
          'invalid-schedule',
        );
      }
      if (delayMs !== undefined && delayMs !== null) {
        throw invalid(
          OutboxMessages.invalidField('schedule', 'give availableAt or delayMs, not both'),
          'invalid-schedule',
        );
      }
      return { availableAt: availableAt as Date, delayMs: null };
    }
    if (delayMs !== undefined && delayMs !== null) {
      if (
        typeof delayMs !== 'number' ||
        !Number.isInteger(delayMs) ||
        delayMs < 0 ||
        delayMs > MAX_DELAY_MS
      ) {
        throw invalid(
          OutboxMessages.invalidField(
            'delayMs',
            `expected a whole number of milliseconds from 0 to 10 years (${MAX_DELAY_MS}), got ${describeValue(delayMs)}`,
          ),
          'invalid-schedule',
        );
      }
      return { availableAt: null, delayMs };
    }
    return { availableAt: null, delayMs: null };
  }
}
