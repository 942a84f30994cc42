import { OUTBOX_HEADER_MESSAGE_ID } from '../../lib';
import { MessageIdMissingError, messageIdFromRedisStream } from '../../lib/inbox';

// The inbox's extractor for Redis stream entries, in each shape a client hands them over.

describe('messageIdFromRedisStream', () => {
  const id = '0190f6c4-8a31-7c3e-9b5e-1d2f3a4b5c6d';

  it("reads ioredis' [id, [field, value, …]] entries, as text or Buffers", () => {
    expect(messageIdFromRedisStream(['1-0', [OUTBOX_HEADER_MESSAGE_ID, id, 'payload', '{}']])).toBe(
      id,
    );
    expect(
      messageIdFromRedisStream([
        Buffer.from('1-0'),
        [
          Buffer.from('x-tenant'),
          Buffer.from('t1'),
          Buffer.from(OUTBOX_HEADER_MESSAGE_ID),
          Buffer.from(id),
        ],
      ]),
    ).toBe(id);
  });

  it('never takes a value for a field name', () => {
    // The id's name appears as the *value* of another field only.
    expect(() =>
      messageIdFromRedisStream(['1-0', ['note', OUTBOX_HEADER_MESSAGE_ID, 'payload', id]]),
    ).toThrow(MessageIdMissingError);
  });

  it("reads node-redis' { id, message } entries and plain field objects", () => {
    expect(
      messageIdFromRedisStream({ id: '1-0', message: { [OUTBOX_HEADER_MESSAGE_ID]: id } }),
    ).toBe(id);
    expect(messageIdFromRedisStream({ [OUTBOX_HEADER_MESSAGE_ID]: Buffer.from(id) })).toBe(id);
  });

  it('throws MessageIdMissingError, saying where it looked, for an entry of another producer', () => {
    const error = (() => {
      try {
        return messageIdFromRedisStream(['1-0', ['payload', '{}']]);
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(MessageIdMissingError);
    expect(error).toMatchObject({
      source: 'redis-stream',
      lookedAt: `field ${OUTBOX_HEADER_MESSAGE_ID} of the stream entry, then a CloudEvent's id (ce_id field, or the payload of a structured event)`,
    });
    expect(() => messageIdFromRedisStream({ message: {} })).toThrow(
      /redis-stream message carries no message id/,
    );
    expect(() => messageIdFromRedisStream({ [OUTBOX_HEADER_MESSAGE_ID]: '' })).toThrow(
      MessageIdMissingError,
    );
  });
});
