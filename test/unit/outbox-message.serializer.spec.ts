import { OutboxEvent, OutboxInvalidMessageError } from '../../lib';
import { OutboxMessageSerializer } from '../../lib/internal/outbox-message.serializer';

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

describe('OutboxMessageSerializer', () => {
  const serializer = new OutboxMessageSerializer(100);

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
    expect([...ids].sort()).toEqual(ids.slice().sort());
    expect(ids[0]).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
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

  it('names the offending message in a batch', () => {
    try {
      serializer.toRow({ topic: 't', payload: { f: () => 1 } }, 3);
      throw new Error('expected a failure');
    } catch (error) {
      expect(error).toBeInstanceOf(OutboxInvalidMessageError);
      expect((error as OutboxInvalidMessageError).index).toBe(3);
      expect((error as Error).message).toMatch(/a function at "f".*message #3/);
    }
  });
});
