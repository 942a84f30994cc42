import { getOutboxEventMetadata } from '../decorators/outbox-event.decorator';
import {
  OutboxInvalidMessageError,
  type OutboxInvalidMessageReason,
} from '../errors/outbox-invalid-message.error';
import type { EnqueueOptions, OutboxMessage } from '../interfaces/outbox-message.interface';
import type { NewOutboxRow } from '../interfaces/outbox-store.interface';
import { OUTBOX_HEADER_PREFIX } from '../outbox.constants';
import { OutboxMessages } from '../outbox.messages';
import { UuidV7Generator } from './uuidv7';

const MAX_NAME = 255;
const MAX_HEADER_VALUE = 8_192;
const MAX_HEADERS = 64;
// CC and BCC are RabbitMQ sender-selected distribution headers: a user value would reroute
// the message to other queues.
const RESERVED_HEADERS = new Set(['cc', 'bcc']);
// eslint-disable-next-line no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f]/;

class NotSerialisable extends Error {}

// Throws where JSON.stringify would silently drop or coerce a value, so that what reaches the
// consumer is exactly what the caller enqueued.
function strictReplacer(this: unknown, key: string, value: unknown): unknown {
  switch (typeof value) {
    case 'function':
      throw new NotSerialisable(`a function at "${key || '(root)'}"`);
    case 'symbol':
      throw new NotSerialisable(`a symbol at "${key || '(root)'}"`);
    case 'bigint':
      throw new NotSerialisable(`a BigInt at "${key || '(root)'}": convert it to a string`);
    case 'number':
      if (!Number.isFinite(value)) {
        throw new NotSerialisable(`${String(value)} at "${key || '(root)'}"`);
      }
      return value;
    default:
      return value;
  }
}

function isPlainMessage(value: object): value is OutboxMessage {
  return 'topic' in value && 'payload' in value && getOutboxEventMetadata(value) === undefined;
}

/** Turns events and plain messages into validated rows; nothing invalid gets through. */
export class OutboxMessageSerializer {
  private readonly ids = new UuidV7Generator();

  constructor(private readonly maxPayloadBytes: number) {}

  toRow(input: object, index: number, options?: EnqueueOptions): NewOutboxRow {
    const invalid = (message: string, reason: OutboxInvalidMessageReason, cause?: unknown) =>
      new OutboxInvalidMessageError(message, reason, index, { cause });
    if (input === null || typeof input !== 'object') {
      throw invalid(
        OutboxMessages.invalidField('input', 'expected an event instance or a message object'),
        'missing-metadata',
      );
    }

    let topic: unknown, type: unknown, key: unknown, headers: unknown, payload: unknown;
    let availableAt: unknown = options?.availableAt;
    let delayMs: unknown = options?.delayMs;
    if (isPlainMessage(input)) {
      ({ topic, key, headers, payload } = input);
      type = input.type ?? input.topic;
      availableAt = input.availableAt ?? availableAt;
      delayMs = input.delayMs ?? delayMs;
    } else {
      const meta = getOutboxEventMetadata(input);
      if (meta === undefined) {
        throw invalid(
          OutboxMessages.missingEventMetadata(input.constructor?.name ?? 'Object'),
          'missing-metadata',
        );
      }
      topic = meta.topic;
      type = meta.type;
      payload = input;
      if (typeof meta.key === 'function') key = meta.key(input);
      else if (typeof meta.key === 'string') key = (input as Record<string, unknown>)[meta.key];
      headers = typeof meta.headers === 'function' ? meta.headers(input) : meta.headers;
    }

    if (
      typeof topic !== 'string' ||
      topic.trim() === '' ||
      topic.length > MAX_NAME ||
      CONTROL_CHARS.test(topic)
    ) {
      throw invalid(
        OutboxMessages.invalidField(
          'topic',
          `expected a non-empty string of at most ${MAX_NAME} characters without control characters, got ${JSON.stringify(topic) ?? String(topic)}`,
        ),
        'invalid-topic',
      );
    }
    if (
      typeof type !== 'string' ||
      type.trim() === '' ||
      type.length > MAX_NAME ||
      CONTROL_CHARS.test(type)
    ) {
      throw invalid(
        OutboxMessages.invalidField(
          'type',
          `expected a non-empty string of at most ${MAX_NAME} characters`,
        ),
        'invalid-type',
      );
    }
    let keyText: string | null = null;
    if (key !== undefined && key !== null) {
      if (typeof key === 'number' && Number.isFinite(key)) keyText = String(key);
      else if (typeof key === 'string' && key !== '' && key.length <= MAX_NAME) keyText = key;
      else {
        throw invalid(
          OutboxMessages.invalidField(
            'key',
            `expected a non-empty string of at most ${MAX_NAME} characters, a finite number or null, got ${typeof key}`,
          ),
          'invalid-key',
        );
      }
    }

    return {
      messageId: this.ids.next(),
      topic,
      key: keyText,
      type,
      payload: this.serialise(payload, invalid),
      headers: this.headers(headers, invalid),
      ...this.schedule(availableAt, delayMs, invalid),
    };
  }

  private serialise(
    payload: unknown,
    invalid: (m: string, r: OutboxInvalidMessageReason, c?: unknown) => Error,
  ): string {
    let json: string | undefined;
    try {
      json = JSON.stringify(payload, strictReplacer);
    } catch (error) {
      const detail =
        error instanceof NotSerialisable
          ? error.message
          : /circular/i.test(String(error))
            ? 'a circular reference'
            : String(error);
      throw invalid(OutboxMessages.notSerialisable(detail), 'not-serialisable', error);
    }
    if (json === undefined) {
      throw invalid(OutboxMessages.notSerialisable('undefined'), 'not-serialisable');
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

  private headers(
    headers: unknown,
    invalid: (m: string, r: OutboxInvalidMessageReason) => Error,
  ): string {
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
      const lower = name.toLowerCase();
      if (RESERVED_HEADERS.has(lower) || lower.startsWith(OUTBOX_HEADER_PREFIX)) {
        throw invalid(OutboxMessages.reservedHeader(name), 'reserved-header');
      }
      if (name === '' || name.length > MAX_NAME || CONTROL_CHARS.test(name)) {
        throw invalid(
          OutboxMessages.invalidField(
            `header name ${JSON.stringify(name)}`,
            `expected 1 to ${MAX_NAME} characters without control characters`,
          ),
          'invalid-header',
        );
      }
      if (typeof value !== 'string' || value.length > MAX_HEADER_VALUE) {
        throw invalid(
          OutboxMessages.invalidField(
            `header "${name}"`,
            `expected a string of at most ${MAX_HEADER_VALUE} characters, got ${typeof value}`,
          ),
          'invalid-header',
        );
      }
    }
    return entries.length === 0 ? '{}' : JSON.stringify(headers);
  }

  private schedule(
    availableAt: unknown,
    delayMs: unknown,
    invalid: (m: string, r: OutboxInvalidMessageReason) => Error,
  ): { availableAt: Date | null; delayMs: number | null } {
    if (availableAt !== undefined && availableAt !== null) {
      if (!(availableAt instanceof Date) || Number.isNaN(availableAt.getTime())) {
        throw invalid(
          OutboxMessages.invalidField('availableAt', 'expected a valid Date'),
          'invalid-schedule',
        );
      }
      if (delayMs !== undefined && delayMs !== null) {
        throw invalid(
          OutboxMessages.invalidField('schedule', 'give availableAt or delayMs, not both'),
          'invalid-schedule',
        );
      }
      return { availableAt, delayMs: null };
    }
    if (delayMs !== undefined && delayMs !== null) {
      if (
        typeof delayMs !== 'number' ||
        !Number.isInteger(delayMs) ||
        delayMs < 0 ||
        delayMs > 3_650 * 86_400_000
      ) {
        throw invalid(
          OutboxMessages.invalidField(
            'delayMs',
            'expected a whole number of milliseconds from 0 to 10 years',
          ),
          'invalid-schedule',
        );
      }
      return { availableAt: null, delayMs };
    }
    return { availableAt: null, delayMs: null };
  }
}
