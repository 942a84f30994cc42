import { Logger } from '@nestjs/common';
import {
  OutboxOptionsError,
  PermanentPublishError,
  PublisherUnavailableError,
  type PublishOutcome,
} from '../../lib';
import { messageIdFromSqs, MessageIdMissingError } from '../../lib/inbox';
import {
  AwsBatchSender,
  chunks,
  waves,
  type AwsBatchAnswer,
  type AwsBatchItem,
} from '../../lib/publishers/aws/aws-batch-sender';
import {
  classifyAwsError,
  isPermanentEntryFailure,
} from '../../lib/publishers/aws/aws-error.classifier';
import { awsMessageGroupId } from '../../lib/publishers/aws/aws-fifo';
import { awsMessageParts } from '../../lib/publishers/aws/aws-message-attributes';
import { awsCloudEventParts } from '../../lib/publishers/aws/aws-cloud-event';
import { cloudEvents } from '../../lib/integrations/cloudevents';
import { sequenceOf } from '../../lib/inbox';
import type { OutboxRecord } from '../../lib';
import { resolveSnsPublisherOptions, SnsPublisher } from '../../lib/publishers/sns';
import { readOutboxSqsMessage, resolveSqsPublisherOptions } from '../../lib/publishers/sqs';

// The SDK-free parts the SQS and SNS publishers share, and their options: pure code. What the
// publishers do against a server is in test/publishers/ (ElasticMQ, fauxqs).

describe('AWS message attributes', () => {
  const base = { messageId: 'id-1', type: 't', key: 'k', payload: '{"a":1}' };

  it('carries id, type, key and each header as its own String attribute while they fit ten', () => {
    const parts = awsMessageParts({ ...base, headers: { a: '1', traceparent: 'tp' } });
    expect(Object.keys(parts.attributes)).toEqual([
      'x-outbox-message-id',
      'x-outbox-type',
      'x-outbox-key',
      'a',
      'traceparent',
    ]);
    expect(parts.body).toBe('{"a":1}');
    // body 7 + (19+6+4) + (13+6+1) + (12+6+1) + (1+6+1) + (11+6+2)
    expect(parts.bytes).toBe(7 + 29 + 20 + 19 + 8 + 19);
  });

  it('folds the headers into x-outbox-headers past ten, or when one is no valid attribute; trace context stays apart', () => {
    const many = Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`h${i}`, 'v']));
    const parts = awsMessageParts({ ...base, headers: { ...many, traceparent: 'tp' } });
    expect(Object.keys(parts.attributes)).toEqual([
      'x-outbox-message-id',
      'x-outbox-type',
      'x-outbox-key',
      'traceparent',
      'x-outbox-headers',
    ]);
    expect(JSON.parse(parts.attributes['x-outbox-headers']?.StringValue ?? '')).toEqual(many);
    const odd: Record<string, string>[] = [
      { 'has space': 'v' },
      { empty: '' },
      { 'AWS.reserved': 'v' },
    ];
    for (const headers of odd) {
      expect(Object.keys(awsMessageParts({ ...base, headers }).attributes)).toContain(
        'x-outbox-headers',
      );
    }
  });

  it('sends a binary payload in base64 with its content type, and reads every form back', () => {
    const parts = awsMessageParts({
      ...base,
      key: null,
      headers: {},
      payload: Buffer.from([1, 2, 3]),
      contentType: 'application/avro',
    });
    expect(parts.body).toBe('AQID');
    const asSqs = {
      Body: parts.body,
      MessageAttributes: parts.attributes as Record<string, { StringValue: string }>,
    };
    expect(readOutboxSqsMessage(asSqs)).toMatchObject({
      messageId: 'id-1',
      key: null,
      contentType: 'application/avro',
      payload: Buffer.from([1, 2, 3]),
      viaSnsNotification: false,
    });
    // A Lambda event record, camelCase.
    const lambda = {
      body: parts.body,
      messageAttributes: { 'x-outbox-message-id': { stringValue: 'id-1', dataType: 'String' } },
    };
    expect(messageIdFromSqs(lambda)).toBe('id-1');
    // An SNS notification around it (no raw delivery).
    const notification = {
      Body: JSON.stringify({
        Type: 'Notification',
        TopicArn: 'arn:aws:sns:eu-west-1:1:t',
        Message: '{"a":1}',
        MessageAttributes: { 'x-outbox-message-id': { Type: 'String', Value: 'id-9' } },
      }),
    };
    expect(messageIdFromSqs(notification)).toBe('id-9');
    expect(readOutboxSqsMessage(notification)).toMatchObject({
      messageId: 'id-9',
      payload: '{"a":1}',
      viaSnsNotification: true,
    });
    expect(() => messageIdFromSqs({ Body: '{"Type":"Notification"}' })).toThrow(
      MessageIdMissingError,
    );
  });

  it('uses the key as the message group when AWS takes it, else its hash; a keyless message its own id', () => {
    expect(awsMessageGroupId('order-42', 'id')).toBe('order-42');
    expect(awsMessageGroupId('order 42', 'id')).toMatch(/^sha256:[\w-]{43}$/);
    expect(awsMessageGroupId('order 42', 'id')).toBe(awsMessageGroupId('order 42', 'other'));
    expect(awsMessageGroupId('x'.repeat(129), 'id')).toMatch(/^sha256:/);
    expect(awsMessageGroupId(null, 'id-7')).toBe('id-7');
  });
});

describe('CloudEvents on SQS and SNS (body and attributes, and reading them back)', () => {
  const record = (over: Partial<OutboxRecord> = {}): OutboxRecord =>
    ({
      id: '1',
      messageId: '0190a1b2-c3d4-7e5f-8a9b-000000000001',
      topic: 'orders',
      key: 'k 1',
      type: 'order.créé',
      payload: '{"n":1}',
      headers: { 'x-outbox-sequence': '42' },
      attempts: 1,
      createdAt: new Date('2026-11-28T10:00:00.000Z'),
      ...over,
    }) as OutboxRecord;
  /** What SQS hands a consumer for `parts`: the body and the String attributes. */
  const received = (parts: ReturnType<typeof awsMessageParts>) => ({
    Body: parts.body,
    MessageAttributes: parts.attributes,
  });
  const binary = cloudEvents({ source: 'urn:example:orders', types: { s: 'structured' } });

  it('binary mode: ce- attributes percent-encoded, content-type as it is, bytes in base64 said by content-transfer-encoding', () => {
    const r = record({
      encoding: 'binary',
      payload: Buffer.from([0, 255]),
      contentType: 'application/avro; v=1',
    });
    const parts = awsCloudEventParts(r, binary.encode(r) as never);
    const text = (name: string) => parts.attributes[name]?.StringValue;
    expect(text('ce-type')).toBe('order.cr%C3%A9%C3%A9');
    expect(text('ce-subject')).toBe('k%201');
    expect(text('ce-sequence')).toBe('0000000000000042');
    expect(text('content-type')).toBe('application/avro; v=1');
    expect(text('content-transfer-encoding')).toBe('base64');
    expect(parts.body).toBe(Buffer.from([0, 255]).toString('base64'));
    const read = readOutboxSqsMessage(received(parts));
    expect(read.payload).toEqual(Buffer.from([0, 255]));
    expect(read.contentType).toBe('application/avro; v=1');
    expect(read.cloudEvent?.attributes).toMatchObject({
      type: 'order.créé',
      subject: 'k 1',
      datacontenttype: 'application/avro; v=1',
    });
    expect(read.headers).toEqual({});
    expect(sequenceOf(received(parts))).toEqual({ key: 'k 1', sequence: 42 });
  });

  it('a header named as the binding\'s content type is left out; a "__proto__" header travels folded and reads back', () => {
    const headers: Record<string, string> = { 'content-type': 'text/plain' };
    for (let i = 0; i < 9; i++) headers[`h${i}`] = String(i);
    Object.defineProperty(headers, '__proto__', { value: 'p', enumerable: true });
    const r = record({ headers });
    const parts = awsCloudEventParts(r, binary.encode(r) as never);
    // The optional attributes the message has keep theirs; every header is folded, none kept.
    expect(Object.keys(parts.attributes)).toEqual([
      'ce-specversion',
      'ce-id',
      'ce-source',
      'ce-type',
      'content-type',
      'ce-time',
      'ce-subject',
      'ce-partitionkey',
      'x-outbox-headers',
    ]);
    expect(parts.attributes['content-type']?.StringValue).toBe('application/json');
    const read = readOutboxSqsMessage(received(parts));
    expect(Object.hasOwn(read.headers, '__proto__')).toBe(true);
    expect(read.headers['__proto__' as 'x']).toBe('p');
    expect(read.headers['content-type']).toBeUndefined();
    expect(read.headers.h8).toBe('8');
  });

  it('structured mode: the data cut out of the body as written; an event another producer wrote is read from its parsed value', () => {
    const r = record({ type: 's', payload: '{"big":12345678901234567890}' });
    const parts = awsCloudEventParts(r, binary.encode(r) as never);
    expect(Object.keys(parts.attributes)).toEqual(['content-type']);
    const read = readOutboxSqsMessage(received(parts));
    // The digits as enqueued: JSON.parse would have rounded them.
    expect(read.payload).toBe('{"big":12345678901234567890}');
    expect(read.cloudEvent?.mode).toBe('structured');

    const foreign = {
      Body: JSON.stringify(
        { data: { a: 1 }, specversion: '1.0', id: 'x-1', source: '/s', type: 't' },
        null,
        2,
      ),
      MessageAttributes: {
        'content-type': { StringValue: 'application/cloudevents+json', DataType: 'String' },
      },
    };
    expect(readOutboxSqsMessage(foreign)).toMatchObject({
      messageId: 'x-1',
      type: 't',
      key: null,
      payload: '{"a":1}',
    });
    expect(messageIdFromSqs(foreign)).toBe('x-1');
  });

  it('a ce- value that is not percent-encoded UTF-8 is left out, as the bindings say', () => {
    const message = {
      Body: '{}',
      MessageAttributes: {
        'ce-specversion': { StringValue: '1.0' },
        'ce-id': { StringValue: 'id-2' },
        'ce-subject': { StringValue: '%FF' },
      },
    };
    const read = readOutboxSqsMessage(message);
    expect(read.cloudEvent?.attributes).toEqual({ specversion: '1.0', id: 'id-2' });
  });
});

describe('classifyAwsError', () => {
  const sdk = (name: string, extra: object = {}) =>
    Object.assign(new Error(name), { name, $fault: 'client', ...extra });

  it.each([
    [
      'a refused connection',
      'unsent',
      Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
    ],
    [
      'the text wrapper of a refused connection by the SDK',
      'unsent',
      new Error('AWS SDK error wrapper for Error: connect ECONNREFUSED 127.0.0.1:1'),
    ],
    [
      'the text wrapper of a reset connection by the SDK',
      'outage',
      new Error('AWS SDK error wrapper for TimeoutError: read ECONNRESET'),
    ],
    [
      'ThrottlingException',
      'outage',
      sdk('ThrottlingException', { $retryable: { throttling: true } }),
    ],
    [
      'InternalError',
      'outage',
      sdk('InternalError', { $fault: 'server', $metadata: { httpStatusCode: 500 } }),
    ],
    [
      'any server fault (503)',
      'outage',
      sdk('Whatever', { $fault: 'server', $metadata: { httpStatusCode: 503 } }),
    ],
    ['AccessDenied', 'credentials', sdk('AccessDenied', { $metadata: { httpStatusCode: 403 } })],
    ['InvalidClientTokenId', 'credentials', sdk('InvalidClientTokenId')],
    ['QueueDoesNotExist', 'destination', sdk('QueueDoesNotExist')],
    ['NotFound', 'destination', sdk('NotFound')],
    ['InvalidAttributeValue', 'request', sdk('InvalidAttributeValue')],
    ['BatchRequestTooLong', 'request', sdk('BatchRequestTooLong')],
    ['AbortError', 'aborted', sdk('AbortError')],
    ['an unknown error', 'other', new Error('something else')],
  ])('%s → %s', (_label, kind, error) => {
    expect(classifyAwsError(error)).toBe(kind);
  });

  it('an entry refused as the sender fault is permanent, unless AWS throttled it', () => {
    expect(isPermanentEntryFailure({ Code: 'InvalidParameterValue', SenderFault: true })).toBe(
      true,
    );
    expect(isPermanentEntryFailure({ Code: 'KMS.ThrottlingException', SenderFault: true })).toBe(
      false,
    );
    expect(isPermanentEntryFailure({ Code: 'InternalError', SenderFault: false })).toBe(false);
  });
});

describe('AwsBatchSender', () => {
  type Entry = { readonly body: string };
  const logger = new Logger('test');
  const item = (
    index: number,
    key: string | null,
    destination = 'q',
    bytes = 10,
  ): AwsBatchItem<Entry> => ({ index, key, destination, bytes, entry: { body: `m${index}` } });

  it('plans waves (a key once per wave, keyless in the first) and calls of at most ten entries and the byte limit, per destination', () => {
    const items = [item(0, 'a'), item(1, 'a'), item(2, null), item(3, 'b'), item(4, 'a')];
    expect(waves(items).map((w) => w.map((i) => i.index))).toEqual([[0, 2, 3], [1], [4]]);
    const many = Array.from({ length: 23 }, (_, i) => item(i, `k${i}`, i % 2 === 0 ? 'q1' : 'q2'));
    const calls = chunks(many, 1_000);
    expect(calls.map((c) => c.length)).toEqual([10, 10, 2, 1]);
    expect(calls.every((c) => new Set(c.map((i) => i.destination)).size === 1)).toBe(true);
    expect(chunks([item(0, 'a', 'q', 600), item(1, 'b', 'q', 600)], 1_000)).toHaveLength(2);
  });

  it('one entry refused as the sender fault fails alone and permanently; a throttled one goes back unsent; the rest is published', async () => {
    const calls: string[][] = [];
    const sender = new AwsBatchSender<Entry>(
      (_, entries): Promise<AwsBatchAnswer> => {
        calls.push(entries.map((e) => e.Id));
        return Promise.resolve({
          successful: entries.filter((e) => !['1', '2'].includes(e.Id)).map((e) => e.Id),
          failed: [
            { Id: '1', Code: 'InvalidParameter', Message: 'bad', SenderFault: true },
            { Id: '2', Code: 'Throttling', Message: 'slow down', SenderFault: false },
          ].filter((f) => entries.some((e) => e.Id === f.Id)),
        });
      },
      {
        service: 'SNS',
        destinationNoun: 'topic',
        maxConcurrentRequests: 4,
        maxBatchBytes: 10_000,
        logger,
      },
    );
    const outcomes: (PublishOutcome | undefined)[] = [];
    await sender.send(
      [item(0, 'a'), item(1, 'b'), item(2, 'c'), item(3, 'd')],
      outcomes,
      new AbortController().signal,
    );
    expect(calls).toEqual([['0', '1', '2', '3']]);
    expect(outcomes[0]).toEqual({ ok: true });
    expect(outcomes[3]).toEqual({ ok: true });
    expect((outcomes[1] as { error: unknown }).error).toBeInstanceOf(PermanentPublishError);
    expect(outcomes[2]).toMatchObject({ ok: false, sent: false });
    expect((outcomes[2] as { error: unknown }).error).toBeInstanceOf(PublisherUnavailableError);
  });

  it('a call refused as a whole for its content is sent again in halves until only the culprit fails; nothing is sent twice', async () => {
    const taken: string[] = [];
    const sender = new AwsBatchSender<Entry>(
      (_, entries): Promise<AwsBatchAnswer> => {
        if (entries.some((e) => e.body === 'm5')) {
          return Promise.reject(
            Object.assign(new Error('MessageTooLong'), { name: 'InvalidAttributeValue' }),
          );
        }
        taken.push(...entries.map((e) => e.body));
        return Promise.resolve({ successful: entries.map((e) => e.Id), failed: [] });
      },
      {
        service: 'SQS',
        destinationNoun: 'queue',
        maxConcurrentRequests: 2,
        maxBatchBytes: 10_000,
        logger,
      },
    );
    const outcomes: (PublishOutcome | undefined)[] = [];
    const items = Array.from({ length: 10 }, (_, i) => item(i, `k${i}`));
    await sender.send(items, outcomes, new AbortController().signal);
    expect(outcomes.filter((o) => o?.ok === true)).toHaveLength(9);
    expect((outcomes[5] as { error: unknown }).error).toBeInstanceOf(PermanentPublishError);
    expect(taken.sort()).toEqual(
      items
        .filter((i) => i.index !== 5)
        .map((i) => `m${i.index}`)
        .sort(),
    );
  });

  it('an aborted signal sends nothing: every message goes back unsent', async () => {
    let called = 0;
    const sender = new AwsBatchSender<Entry>(
      () => {
        called += 1;
        return Promise.resolve({ successful: [], failed: [] });
      },
      {
        service: 'SQS',
        destinationNoun: 'queue',
        maxConcurrentRequests: 1,
        maxBatchBytes: 1_000,
        logger,
      },
    );
    const controller = new AbortController();
    controller.abort(new Error('stop'));
    const outcomes: (PublishOutcome | undefined)[] = [];
    await sender.send([item(0, 'a'), item(1, null)], outcomes, controller.signal);
    expect(called).toBe(0);
    expect(outcomes.every((o) => o?.ok === false && o.sent === false)).toBe(true);
  });
});

describe('SqsPublisher and SnsPublisher options', () => {
  const binaryEvents = cloudEvents({ source: '/s' });

  it('take a client or its configuration, and refuse what would misroute or exceed the limits, naming the option', () => {
    expect(resolveSqsPublisherOptions({}).maxMessageBytes).toBe(262_144);
    expect(resolveSqsPublisherOptions({ queue: 'orders.fifo' }).fixedQueue).toBe('orders.fifo');
    expect(() => resolveSqsPublisherOptions({ queue: 'no spaces' })).toThrow(OutboxOptionsError);
    expect(() => resolveSqsPublisherOptions({ maxMessageBytes: 2_000_000 })).toThrow(
      /maxMessageBytes/,
    );
    expect(() => resolveSqsPublisherOptions({ queeu: 'x' } as never)).toThrow(/queue/);
    expect(() => resolveSnsPublisherOptions({ topicArn: 'orders' })).toThrow(
      /not an SNS topic ARN/,
    );
    // SNS follows the topic's MaximumMessageSize: 256 KiB by default, up to 1 MiB.
    expect(resolveSnsPublisherOptions({}).maxMessageBytes).toBe(262_144);
    expect(resolveSnsPublisherOptions({ maxMessageBytes: 1_048_576 }).maxMessageBytes).toBe(
      1_048_576,
    );
    expect(() => resolveSnsPublisherOptions({ maxMessageBytes: 1_048_577 })).toThrow(
      /maxMessageBytes/,
    );
    // A configuration with credentials is never echoed.
    const secret = 'wJalrXUtnFEMI/K7MDENG';
    let message = '';
    try {
      resolveSqsPublisherOptions({
        client: { credentials: { accessKeyId: 'AKIA', secretAccessKey: secret } },
        maxConcurrentRequests: 0,
      });
    } catch (error) {
      message = String(error);
    }
    expect(message).toMatch(/maxConcurrentRequests/);
    expect(message).not.toContain(secret);
  });

  it('refuse a cloudEvents value that cloudEvents() did not make', () => {
    for (const resolve of [resolveSqsPublisherOptions, resolveSnsPublisherOptions]) {
      const bad = () => resolve({ cloudEvents: { source: '/s' } } as never);
      expect(bad).toThrow(OutboxOptionsError);
      expect(bad).toThrow(/cloudEvents.*is not what cloudEvents\(\) makes/);
    }
    expect(resolveSqsPublisherOptions({ cloudEvents: binaryEvents }).cloudEvents).toBe(
      binaryEvents,
    );
  });

  it('SnsPublisher.checkEnqueue judges the ARN its topicArn function gives each message', () => {
    const sns = new SnsPublisher({
      topicArn: (m) => `arn:aws:sns:eu-west-1:123456789012:${m.topic}`,
    });
    const draft = {
      messageId: 'i',
      topic: 'orders',
      key: null,
      type: 't',
      headers: {},
      payload: '{}',
    };
    expect(sns.checkEnqueue(draft)).toBeUndefined();
    expect(sns.checkEnqueue({ ...draft, topic: 'has space' })).toMatchObject({
      reason: 'invalid-topic',
    });
  });
});
