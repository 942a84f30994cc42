import { randomUUID } from 'node:crypto';
import { OUTBOX_HEADER_MESSAGE_ID } from 'nestjs-outbox';
import {
  messageIdFromAmqp,
  messageIdFromJetStream,
  messageIdFromKafka,
  messageIdFromRedisStream,
  messageIdFromRpcContext,
  messageIdFromSqs,
} from 'nestjs-outbox/inbox';

// Debezium's router on a MySQL/MariaDB outbox (message_id BINARY(16), binary.handling.mode=hex)
// sends the id as 32 hex digits; the module's publishers send UUID text. Every extractor gives
// both the one id the inbox deduplicates by.

const id = randomUUID();
const hex = id.replace(/-/g, '');
const header = { [OUTBOX_HEADER_MESSAGE_ID]: '' };
const withId = (value: string) => ({ ...header, [OUTBOX_HEADER_MESSAGE_ID]: value });

describe('message id extractors: one id for the UUID text and the 32 hex digits of a message', () => {
  const spellings = [id, hex, hex.toUpperCase(), id.toUpperCase()];

  it.each(spellings)('kafkajs header %s (text and Buffer) is the UUID text', (spelling) => {
    expect(messageIdFromKafka({ headers: withId(spelling) })).toBe(id);
    expect(
      messageIdFromKafka({ headers: { [OUTBOX_HEADER_MESSAGE_ID]: Buffer.from(spelling) } }),
    ).toBe(id);
  });

  it.each(spellings)('every other extractor maps %s to the UUID text', (spelling) => {
    expect(messageIdFromAmqp({ properties: { headers: withId(spelling) } })).toBe(id);
    expect(messageIdFromAmqp({ properties: { messageId: spelling } })).toBe(id);
    expect(
      messageIdFromJetStream({
        headers: { get: (n) => (n === OUTBOX_HEADER_MESSAGE_ID ? spelling : '') },
      }),
    ).toBe(id);
    expect(messageIdFromRedisStream([`1-0`, [OUTBOX_HEADER_MESSAGE_ID, spelling]])).toBe(id);
    // A KafkaContext: its getMessage() answers the kafkajs message.
    const kafkaContext = { getArgs: () => [], getMessage: () => ({ headers: withId(spelling) }) };
    expect(messageIdFromRpcContext(kafkaContext)).toBe(id);
    expect(
      messageIdFromSqs({
        MessageAttributes: {
          [OUTBOX_HEADER_MESSAGE_ID]: { StringValue: spelling },
        },
      }),
    ).toBe(id);
  });

  it('ids of other shapes are kept byte for byte', () => {
    for (const other of [
      `Order-${hex}`,
      hex.slice(1),
      `${hex}0`,
      `${hex.slice(0, 31)}g`,
      ` ${id}`,
      `{${id}}`,
      'bin:ff',
    ]) {
      expect(messageIdFromKafka({ headers: withId(other) })).toBe(other);
    }
    expect(
      messageIdFromKafka({ headers: { [OUTBOX_HEADER_MESSAGE_ID]: Buffer.from([0xfe]) } }),
    ).toBe('bin:fe');
  });
});
