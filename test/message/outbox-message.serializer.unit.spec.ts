import { UuidV7Generator } from '../../lib/message/uuidv7';
import { OutboxEvent, OutboxInvalidMessageError } from '../../lib';
import { OutboxMessageSerializer } from '../../lib/message/outbox-message.serializer';

@OutboxEvent({
  topic: 'users',
  type: 'user.renamed',
  key: (e: UserRenamed) => e.userId,
  headers: (e: UserRenamed) => ({ tenant: e.tenant }),
})
class UserRenamed {
  constructor(
    readonly userId: number,
    readonly tenant: string,
    readonly name: string,
  ) {}
}

class Base {}
@OutboxEvent({ topic: 'base' })
class Decorated extends Base {
  readonly n = 1;
}
class Inherits extends Decorated {}

@OutboxEvent({ topic: 'trusted', validatePayload: false })
class Trusted {
  constructor(readonly values: unknown) {}
}

@OutboxEvent({
  topic: 'avro',
  contentType: 'application/avro',
  encode: (e: Encoded) => Buffer.from(`enc:${e.id}`),
  attributes: (e: Encoded) => ({ kafka: { partition: e.id % 3 } }),
})
class Encoded {
  constructor(readonly id: number) {}
}

describe('OutboxMessageSerializer: binary payloads and broker attributes', () => {
  const serializer = new OutboxMessageSerializer(100);

  it('leaves a JSON row as it was: no binary part, no attributes', () => {
    const row = serializer.toRow({ topic: 't', payload: { n: 1 } }, 0);
    expect(row.payload).toBe('{"n":1}');
    expect(Object.keys(row)).not.toContain('binary');
    expect(Object.keys(row)).not.toContain('attributes');
  });

  it('copies the bytes of a plain binary message, so a later change by the caller does not alter them', () => {
    const bytes = new Uint8Array([0, 255, 7]);
    const row = serializer.toRow({ topic: 't', payload: bytes, contentType: 'image/png' }, 0);
    bytes[0] = 9;
    expect(row.binary?.bytes).toEqual(Buffer.from([0, 255, 7]));
    expect(row.binary?.contentType).toBe('image/png');
    expect(row.payload).toBe('null');
  });

  it("encodes an event with its class's encode, and computes its attributes", () => {
    const row = serializer.toRow(new Encoded(4), 0);
    expect(row.binary).toEqual({ bytes: Buffer.from('enc:4'), contentType: 'application/avro' });
    expect(row.attributes).toBe('{"kafka":{"partition":1}}');
  });

  it('drops undefined attributes and stores none when nothing is left', () => {
    const row = serializer.toRow(
      {
        topic: 't',
        payload: {},
        attributes: { rabbitmq: { priority: undefined }, kafka: undefined },
      },
      0,
    );
    expect(Object.keys(row)).not.toContain('attributes');
  });

  it('names the bad attribute and the known ones', () => {
    expect(() =>
      serializer.toRow({ topic: 't', payload: {}, attributes: { rabbitmq: { prority: 1 } } }, 0),
    ).toThrow(
      /Invalid message attributes\.rabbitmq: "prority" is not an attribute here; the known ones are "priority", "expiration", "exchange", "routingKey"/,
    );
    expect(() =>
      serializer.toRow({ topic: 't', payload: {}, attributes: { kafka: { partition: -1 } } }, 0),
    ).toThrow(/attributes\.kafka\.partition: expected a whole number from 0 to 2147483647, got -1/);
  });

  it('keeps redis attributes (a stream key, a maxLen) and refuses bad ones', () => {
    const row = serializer.toRow(
      { topic: 't', payload: {}, attributes: { redis: { stream: 'audit:orders', maxLen: 1_000 } } },
      0,
    );
    expect(row.attributes).toBe('{"redis":{"stream":"audit:orders","maxLen":1000}}');
    const refused = (redis: object) => () =>
      serializer.toRow({ topic: 't', payload: {}, attributes: { redis } }, 0);
    expect(refused({ stream: '' })).toThrow(
      /attributes\.redis\.stream: expected a stream key of 1 to 1024 UTF-8 bytes without control characters, got a string of 0 characters/,
    );
    expect(refused({ stream: 'a\nb' })).toThrow(/attributes\.redis\.stream: expected a stream key/);
    expect(refused({ stream: 'x'.repeat(1_025) })).toThrow(/attributes\.redis\.stream/);
    expect(refused({ maxLen: 0 })).toThrow(
      /attributes\.redis\.maxLen: expected a whole number from 1 to 9007199254740991, got 0/,
    );
    expect(refused({ maxlen: 10 })).toThrow(
      /attributes\.redis: "maxlen" is not an attribute here; the known ones are "stream", "maxLen"/,
    );
  });
});

describe('OutboxMessageSerializer', () => {
  const serializer = new OutboxMessageSerializer(100);

  it('says which field a plain message lacks, with the one it likely meant, instead of asking for @OutboxEvent', () => {
    const errorOf = (input: object): OutboxInvalidMessageError => {
      try {
        serializer.toRow(input, 0);
      } catch (error) {
        return error as OutboxInvalidMessageError;
      }
      throw new Error('accepted');
    };
    const noTopic = errorOf({ payload: { a: 1 } });
    expect(noTopic).toBeInstanceOf(OutboxInvalidMessageError);
    expect(noTopic.message).toMatch(/plain object but it has no "topic"/);
    expect(noTopic.message).not.toMatch(/Class Object/);
    expect(errorOf({ topc: 'orders', payload: {} }).message).toMatch(
      /"topc": did you mean "topic"\?/,
    );
    expect(errorOf({ topic: 'orders', paylaod: {} }).message).toMatch(
      /no "payload" \("paylaod": did you mean "payload"\?\)/,
    );
  });

  it('resolves topic, type, key and headers from the event class', () => {
    const row = serializer.toRow(new UserRenamed(5, 'acme', 'Ann'), 0);
    expect(row).toMatchObject({
      topic: 'users',
      type: 'user.renamed',
      key: '5',
      headers: '{"tenant":"acme"}',
      availableAt: null,
      delayMs: null,
    });
    expect(JSON.parse(row.payload)).toEqual({ userId: 5, tenant: 'acme', name: 'Ann' });
  });

  it('defaults the type to the class name and inherits metadata', () => {
    expect(serializer.toRow(new Inherits(), 0)).toMatchObject({
      topic: 'base',
      type: 'Decorated',
      key: null,
    });
  });

  it('generates distinct, time-ordered UUIDv7 ids', () => {
    const ids = Array.from(
      { length: 1_000 },
      () => serializer.toRow({ topic: 't', payload: 1 }, 0).messageId,
    );
    expect(new Set(ids).size).toBe(ids.length);
    // Ids of one millisecond differ in their random part only: the time prefixes never go back.
    const prefixes = ids.map((id) => id.slice(0, 13));
    expect([...prefixes].sort()).toEqual(prefixes);
    expect(ids[0]).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('writes the millisecond time in the first 48 bits and the version and variant bits', () => {
    const ids = new UuidV7Generator();
    for (const now of [
      0,
      1,
      0xff_ffff,
      0x1_00_0000,
      Date.UTC(2026, 10, 24, 7, 0, 0, 123),
      2 ** 48 - 1,
    ]) {
      const id = ids.next(now);
      expect(id.replace(/-/g, '').slice(0, 12)).toBe(now.toString(16).padStart(12, '0'));
    }
    // Across pool refills (256 ids a block), every id keeps its layout and none repeats.
    const many = Array.from({ length: 3_000 }, () => ids.next(1_700_000_000_000));
    for (const id of many)
      expect(id).toMatch(/^018bcfe5-6800-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(new Set(many).size).toBe(many.length);
  });

  it('counts the payload limit in UTF-8 bytes', () => {
    expect(() => serializer.toRow({ topic: 't', payload: 'é'.repeat(40) }, 0)).not.toThrow(); // 82 bytes
    expect(() => serializer.toRow({ topic: 't', payload: '€'.repeat(40) }, 0)).toThrow(
      /122 bytes, over the limit of 100/,
    ); // 122 bytes
  });

  it('rejects undefined payloads and both schedule forms at once', () => {
    expect(() => serializer.toRow({ topic: 't', payload: undefined }, 0)).toThrow(
      OutboxInvalidMessageError,
    );
    expect(() =>
      serializer.toRow({ topic: 't', payload: 1, availableAt: new Date(), delayMs: 5 }, 0),
    ).toThrow(/not both/);
  });

  it('with validatePayload false stores what JSON.stringify makes, still refusing what no row can hold', () => {
    // Validated: an undefined property is refused, since JSON would drop it.
    expect(() => serializer.toRow({ topic: 't', payload: { a: undefined, b: 1 } }, 0)).toThrow(
      /payload.a is undefined/,
    );
    const unchecked = { topic: 't', payload: { a: undefined, b: 1 }, validatePayload: false };
    expect(serializer.toRow(unchecked, 0).payload).toBe('{"b":1}');
    expect(serializer.toRow(new Trusted([1, undefined]), 0).payload).toBe('{"values":[1,null]}');
    // Still refused: nothing to store, a value JSON cannot write, and the size limit.
    expect(() =>
      serializer.toRow({ topic: 't', payload: undefined, validatePayload: false }, 0),
    ).toThrow(OutboxInvalidMessageError);
    expect(() => serializer.toRow(new Trusted(10n), 0)).toThrow(/BigInt/);
    expect(() => serializer.toRow(new Trusted('x'.repeat(200)), 0)).toThrow(
      /over the limit of 100/,
    );
    expect(() =>
      serializer.toRow(JSON.parse('{"topic":"t","payload":1,"validatePayload":"no"}') as object, 0),
    ).toThrow(/validatePayload.*expected true or false/);
  });

  it('names the offending message in a batch', () => {
    try {
      serializer.toRow({ topic: 't', payload: { f: () => 1 } }, 3);
      throw new Error('expected a failure');
    } catch (error) {
      expect(error).toBeInstanceOf(OutboxInvalidMessageError);
      expect((error as OutboxInvalidMessageError).index).toBe(3);
      expect((error as Error).message).toMatch(/payload\.f is a function.*message #3/);
    }
  });

  const cyclic: Record<string, unknown> = { a: { b: 1 } };
  (cyclic.a as Record<string, unknown>).back = cyclic;
  class Money {
    constructor(
      readonly amount: number,
      readonly currency: string,
    ) {}
  }
  // [case, message, reason, what the error message must say]
  const rejected: [string, object, string, RegExp][] = [
    [
      'NUL in the key',
      { topic: 't', payload: 1, key: 'a\u0000b' },
      'invalid-key',
      /key: it contains a NUL/,
    ],
    [
      'NUL in the topic',
      { topic: 'a\u0000b', payload: 1 },
      'invalid-topic',
      /topic: "a\\u0000b" contains a NUL/,
    ],
    ['NUL in the type', { topic: 't', type: 'x\u0000', payload: 1 }, 'invalid-type', /type: .*NUL/],
    [
      'a newline in the topic',
      { topic: 'a\nb', payload: 1 },
      'invalid-topic',
      /control character U\+000A/,
    ],
    [
      'NUL in a header name',
      { topic: 't', payload: 1, headers: { 'a\u0000': 'v' } },
      'invalid-header',
      /header name "a\\u0000": .*NUL/,
    ],
    [
      'a header named __proto__ (an own property, as JSON.parse makes it)',
      { topic: 't', payload: 1, headers: JSON.parse('{"__proto__": "v"}') as object },
      'invalid-header',
      /header name "__proto__": JavaScript objects take it for their prototype/,
    ],
    [
      'NUL in a header value',
      { topic: 't', payload: 1, headers: { tenant: 'a\u0000' } },
      'invalid-header',
      /header "tenant": its value contains a NUL/,
    ],
    [
      'NUL in a payload string',
      { topic: 't', payload: { items: ['ok', 'a\u0000b'] } },
      'not-serialisable',
      /payload\.items\[1\]: it contains a NUL character.*rejected on every database/,
    ],
    [
      'NUL in a payload property name',
      { topic: 't', payload: { 'a\u0000': 1 } },
      'not-serialisable',
      /payload\["a\\u0000"\]: it has a property name that contains a NUL/,
    ],
    [
      'a lone surrogate in a payload string',
      { topic: 't', payload: { name: '\ud83d' } },
      'not-serialisable',
      /payload\.name: it contains a lone surrogate/,
    ],
    [
      'a lone surrogate in the key',
      { topic: 't', payload: 1, key: 'x\udc00' },
      'invalid-key',
      /lone surrogate/,
    ],
    [
      "a key beginning as the outbox's re-drive lanes do",
      { topic: 't', payload: 1, key: '\u0001redrive-lane:abc' },
      'invalid-key',
      /key: it begins as the outbox marks its re-drive lanes/,
    ],
    [
      'a Map',
      { topic: 't', payload: { byId: new Map([[1, 'a']]) } },
      'not-serialisable',
      /payload\.byId is a Map, which JSON would store as \{\}/,
    ],
    [
      'a Set',
      { topic: 't', payload: { tags: new Set(['a']) } },
      'not-serialisable',
      /payload\.tags is a Set/,
    ],
    [
      'undefined in an array',
      { topic: 't', payload: { items: [1, undefined, 3] } },
      'not-serialisable',
      /payload\.items\[1\] is undefined, which JSON would store as null/,
    ],
    [
      'an undefined property',
      { topic: 't', payload: { a: undefined } },
      'not-serialisable',
      /payload\.a is undefined, which JSON would drop/,
    ],
    [
      'an invalid Date',
      { topic: 't', payload: { at: new Date('nope') } },
      'not-serialisable',
      /payload\.at is an invalid Date/,
    ],
    [
      'a symbol',
      { topic: 't', payload: { s: Symbol('s') } },
      'not-serialisable',
      /payload\.s is a symbol/,
    ],
    [
      'a BigInt',
      { topic: 't', payload: { n: [10n] } },
      'not-serialisable',
      /payload\.n\[0\] is a BigInt/,
    ],
    ['NaN', { topic: 't', payload: { n: NaN } }, 'not-serialisable', /payload\.n is NaN/],
    [
      'Infinity',
      { topic: 't', payload: { 'a b': -Infinity } },
      'not-serialisable',
      /payload\["a b"\] is -Infinity/,
    ],
    [
      'a circular reference',
      { topic: 't', payload: cyclic },
      'not-serialisable',
      /payload\.a\.back refers back to an object that contains it/,
    ],
    [
      'an Error',
      { topic: 't', payload: { e: new Error('x') } },
      'not-serialisable',
      /payload\.e is a Error/,
    ],
    [
      'a Uint8Array',
      { topic: 't', payload: new Uint8Array(2) },
      'not-serialisable',
      /payload is a Uint8Array/,
    ],
    [
      'a throwing toJSON()',
      {
        topic: 't',
        payload: {
          toJSON() {
            throw new Error('password=hunter2 broke');
          },
        },
      },
      'not-serialisable',
      /serialising it threw Error: password=\*\*\*\)/,
    ],
    [
      'availableAt in year 10000',
      { topic: 't', payload: 1, availableAt: new Date('+010000-01-01T00:00:00Z') },
      'invalid-schedule',
      /from 1970-01-01 to 9999-12-31 .*got \+010000-01-01/,
    ],
    [
      'availableAt before 1970',
      { topic: 't', payload: 1, availableAt: new Date('1969-12-31T23:59:59.999Z') },
      'invalid-schedule',
      /availableAt/,
    ],
    [
      'availableAt that is not a Date',
      { topic: 't', payload: 1, availableAt: Date.now() },
      'invalid-schedule',
      /got \d+/,
    ],
    [
      'a fractional delayMs',
      { topic: 't', payload: 1, delayMs: 1.5 },
      'invalid-schedule',
      /delayMs/,
    ],
    ['a negative delayMs', { topic: 't', payload: 1, delayMs: -1 }, 'invalid-schedule', /delayMs/],
    [
      'an infinite delayMs',
      { topic: 't', payload: 1, delayMs: Infinity },
      'invalid-schedule',
      /delayMs/,
    ],
    [
      'a delayMs over 10 years',
      { topic: 't', payload: 1, delayMs: 3_650 * 86_400_000 + 1 },
      'invalid-schedule',
      /delayMs/,
    ],
  ];
  const large = new OutboxMessageSerializer(10_000);

  it.each(rejected)('rejects %s', (_name, input, reason, text) => {
    let caught: unknown;
    try {
      large.toRow(input, 0);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(OutboxInvalidMessageError);
    expect(caught).toMatchObject({ reason, index: 0 });
    expect((caught as Error).message).toMatch(text);
  });

  it('does not echo a bad key or header value into the message', () => {
    expect(() =>
      large.toRow({ topic: 't', payload: 1, headers: { auth: 'tok\u0000en-secret' } }, 0),
    ).toThrow(expect.objectContaining({ message: expect.not.stringContaining('secret') }));
    expect(() => large.toRow({ topic: 't', payload: 1, key: 'ann@example.com\u0000' }, 0)).toThrow(
      expect.objectContaining({ message: expect.not.stringContaining('ann@') }),
    );
  });

  it('keeps what JSON represents faithfully', () => {
    const at = new Date('2030-01-02T03:04:05.678Z');
    const row = large.toRow(
      {
        topic: 't',
        payload: { at, money: new Money(5, 'EUR'), emoji: '😀', nothing: null, list: [1, null] },
        availableAt: new Date('9999-12-31T23:59:59.999Z'),
      },
      0,
    );
    expect(JSON.parse(row.payload)).toEqual({
      at: '2030-01-02T03:04:05.678Z',
      money: { amount: 5, currency: 'EUR' },
      emoji: '😀',
      nothing: null,
      list: [1, null],
    });
    expect(row.availableAt?.toISOString()).toBe('9999-12-31T23:59:59.999Z');
    // The same object twice is not a cycle.
    const shared = { x: 1 };
    expect(JSON.parse(large.toRow({ topic: 't', payload: [shared, shared] }, 0).payload)).toEqual([
      { x: 1 },
      { x: 1 },
    ]);
  });

  it('reports the first problem of a payload in order, text problems included', () => {
    // The NUL comes before the undefined: it is the one named.
    expect(() =>
      serializer.toRow({ topic: 't', payload: { name: 'a\u0000', later: undefined } }, 0),
    ).toThrow(/payload\.name: it contains a NUL/);
    expect(() =>
      serializer.toRow({ topic: 't', payload: { early: undefined, name: 'a\u0000' } }, 0),
    ).toThrow(/payload\.early is undefined/);
    // What a toJSON() returns is checked like the rest.
    expect(() =>
      serializer.toRow({ topic: 't', payload: { v: { toJSON: () => ({ s: '\udc00' }) } } }, 0),
    ).toThrow(/payload\.v\.s: it contains a lone surrogate/);
  });

  it('keeps text that JSON escapes with \\u but every database stores', () => {
    const payload = { path: 'C:\\users\\u0000x', ansi: '\u001b[1mbold\u001b[0m', bell: '\u0007' };
    const row = serializer.toRow({ topic: 't', payload }, 0);
    expect(row.payload).toBe(JSON.stringify(payload));
    expect(JSON.parse(row.payload)).toEqual(payload);
  });

  it('turns a throwing key or headers function into OutboxInvalidMessageError with the cause', () => {
    const failure = new Error('no tenant');
    @OutboxEvent({
      topic: 't',
      key: () => {
        throw failure;
      },
    })
    class BadKey {}
    @OutboxEvent({
      topic: 't',
      headers: () => {
        throw failure;
      },
    })
    class BadHeaders {}
    @OutboxEvent({ topic: 't', key: 'id' })
    class BadGetter {
      get id(): string {
        throw failure;
      }
    }
    for (const [event, reason] of [
      [new BadKey(), 'invalid-key'],
      [new BadHeaders(), 'invalid-header'],
      [new BadGetter(), 'invalid-key'],
    ] as const) {
      let caught: unknown;
      try {
        large.toRow(event, 2);
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(OutboxInvalidMessageError);
      expect(caught).toMatchObject({ reason, index: 2, cause: failure });
      expect((caught as Error).message).toMatch(
        new RegExp(`@OutboxEvent\\(\\) on ${event.constructor.name} threw Error: no tenant`),
      );
    }
  });
});
