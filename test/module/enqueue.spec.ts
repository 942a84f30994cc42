import { randomUUID } from 'node:crypto';
import {
  OutboxEvent,
  OutboxInvalidMessageError,
  OutboxService,
  OutboxTransactionRequiredError,
} from '../../lib';
import { fromClsTransactionHost } from '../../lib/integrations/cls';
import { readOutbox, TEST_DATABASES, TestOrder } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { describeWith } from '../support/services';
import { messageIdText } from '../../lib/store/rows/message-id-codec';

@OutboxEvent({
  topic: 'orders',
  type: 'order.created',
  key: (e: OrderCreated) => e.orderId,
  headers: { source: 'test' },
})
class OrderCreated {
  constructor(
    readonly orderId: string,
    readonly total: number,
  ) {}
}

@OutboxEvent({ topic: 'orders', key: 'orderId' })
class OrderShipped {
  constructor(readonly orderId: number) {}
}

class Undecorated {
  constructor(readonly value = 1) {}
}

@OutboxEvent({
  topic: 'orders',
  key: () => {
    throw new Error('key lookup failed');
  },
})
class KeyThrows {}

@OutboxEvent({
  topic: 'orders',
  headers: () => {
    throw new Error('tenant missing');
  },
})
class HeadersThrow {}

for (const db of TEST_DATABASES) {
  describeWith(db.service === null ? [] : [db.service], `enqueue on ${db.name}`, () => {
    const scope = useOutboxScope(db);
    const table = scope.baseTable;
    let outbox: OutboxService;

    beforeAll(async () => {
      ({ outbox } = await scope.openShared({ table, options: { maxPayloadBytes: 1_024 } }));
    });

    beforeEach(async () => {
      await scope.ds.query(
        `DELETE FROM ${scope.ds.options.type === 'mariadb' ? `\`${table}\`` : `"${table}"`}`,
      );
    });

    const orders = () => scope.ds.getRepository(TestOrder);
    /**
     * The orders of one customer: the orders table is shared, and specs in the other jest
     * process of the run write to it meanwhile, so a count of all of them can move.
     */
    const ordersOf = (customer: string) => orders().countBy({ customer });

    it('writes the business row and the message when the transaction commits', async () => {
      const customer = `c-1-${randomUUID()}`;
      const id = await scope.ds.transaction(async (manager) => {
        const order = await manager.save(TestOrder, { customer });
        return outbox.enqueue(new OrderCreated(String(order.id), 42.5), manager);
      });
      expect(await ordersOf(customer)).toBe(1);
      const rows = await readOutbox(scope.ds, table);
      expect(rows).toHaveLength(1);
      const [row] = rows;
      expect(row).toMatchObject({
        messageId: id,
        topic: 'orders',
        type: 'order.created',
        payload: { orderId: expect.any(String), total: 42.5 },
        headers: { source: 'test' },
        status: 'pending',
        attempts: 0,
        lockedBy: null,
      });
      expect(row?.key).toBe((row?.payload as { orderId: string }).orderId);
      // UUIDv7: version nibble 7, RFC variant.
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    });

    it('uses the class name as type and a property as key', async () => {
      await scope.ds.transaction((m) => outbox.enqueue(new OrderShipped(7), m));
      const [row] = await readOutbox(scope.ds, table);
      expect(row).toMatchObject({
        type: 'OrderShipped',
        key: '7',
        payload: { orderId: 7 },
        headers: {},
      });
    });

    it('writes plain messages and keeps their order within one call', async () => {
      const messages = Array.from({ length: 250 }, (_, i) => ({
        topic: 'audit',
        key: i % 2 === 0 ? 'even' : null,
        type: 'audit.entry',
        payload: { i, text: 'é✓' },
        headers: { 'x-tenant': 't1' },
      }));
      const ids = await scope.ds.transaction((m) => outbox.enqueue(messages, m));
      const rows = await readOutbox(scope.ds, table);
      expect(rows.map((r) => r.messageId)).toEqual(ids);
      expect(rows.map((r) => (r.payload as { i: number }).i)).toEqual(
        messages.map((m) => m.payload.i),
      );
      expect(rows[0]).toMatchObject({
        key: 'even',
        headers: { 'x-tenant': 't1' },
        payload: { text: 'é✓' },
      });
      expect(rows[1]?.key).toBeNull();
    });

    it('writes nothing when the transaction rolls back', async () => {
      const customer = `c-2-${randomUUID()}`;
      await expect(
        scope.ds.transaction(async (m) => {
          await m.save(TestOrder, { customer });
          await outbox.enqueue(new OrderCreated('o-2', 1), m);
          throw new Error('business rule failed after enqueue');
        }),
      ).rejects.toThrow('business rule failed after enqueue');
      expect(await ordersOf(customer)).toBe(0);
      expect(await readOutbox(scope.ds, table)).toHaveLength(0);
    });

    it('writes nothing after an explicit rollback of a QueryRunner transaction', async () => {
      const runner = scope.ds.createQueryRunner();
      await runner.connect();
      await runner.startTransaction();
      await outbox.enqueue(new OrderCreated('o-3', 1), runner.manager);
      await runner.rollbackTransaction();
      await runner.release();
      expect(await readOutbox(scope.ds, table)).toHaveLength(0);
    });

    it('commits through a QueryRunner transaction', async () => {
      const runner = scope.ds.createQueryRunner();
      await runner.connect();
      await runner.startTransaction();
      await outbox.enqueue(new OrderCreated('o-4', 1), runner.manager);
      await runner.commitTransaction();
      await runner.release();
      expect(await readOutbox(scope.ds, table)).toHaveLength(1);
    });

    it('drops the message of a rolled-back savepoint and keeps the outer one', async () => {
      const runner = scope.ds.createQueryRunner();
      await runner.connect();
      await runner.startTransaction();
      await outbox.enqueue(new OrderCreated('outer', 1), runner.manager);
      await runner.startTransaction(); // nested: a savepoint
      await outbox.enqueue(new OrderCreated('inner', 1), runner.manager);
      await runner.rollbackTransaction();
      await runner.commitTransaction();
      await runner.release();
      const rows = await readOutbox(scope.ds, table);
      expect(rows.map((r) => r.key)).toEqual(['outer']);
    });

    it('refuses to write outside a transaction', async () => {
      await expect(outbox.enqueue(new OrderCreated('o-5', 1))).rejects.toBeInstanceOf(
        OutboxTransactionRequiredError,
      );
      await expect(
        outbox.enqueue(new OrderCreated('o-5', 1), scope.ds.manager),
      ).rejects.toBeInstanceOf(OutboxTransactionRequiredError);
      expect(await readOutbox(scope.ds, table)).toHaveLength(0);
    });

    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    const badInputs: [string, object, string][] = [
      ['a class without @OutboxEvent', new Undecorated(), 'missing-metadata'],
      ['a cyclic payload', { topic: 't', payload: cyclic }, 'not-serialisable'],
      ['a BigInt payload', { topic: 't', payload: { n: 10n } }, 'not-serialisable'],
      ['a function in the payload', { topic: 't', payload: { f: () => 1 } }, 'not-serialisable'],
      ['NaN in the payload', { topic: 't', payload: { n: NaN } }, 'not-serialisable'],
      [
        'a payload over the limit',
        { topic: 't', payload: { s: 'x'.repeat(2_000) } },
        'payload-too-large',
      ],
      ['an empty topic', { topic: '', payload: {} }, 'invalid-topic'],
      [
        'a non-string header value',
        { topic: 't', payload: {}, headers: { n: 1 } },
        'invalid-header',
      ],
      [
        'a reserved CC header',
        { topic: 't', payload: {}, headers: { CC: 'other-queue' } },
        'reserved-header',
      ],
      [
        'a header named __proto__',
        { topic: 't', payload: {}, headers: JSON.parse('{"__proto__": "v"}') as object },
        'invalid-header',
      ],
      [
        'a reserved x-outbox- header',
        { topic: 't', payload: {}, headers: { 'x-outbox-message-id': 'forged' } },
        'reserved-header',
      ],
      ['an object key', { topic: 't', payload: {}, key: { id: 1 } }, 'invalid-key'],
      [
        'an invalid availableAt',
        { topic: 't', payload: {}, availableAt: new Date('nope') },
        'invalid-schedule',
      ],
      // Before the audit of issue 8: PostgreSQL failed the INSERT with a raw QueryFailedError.
      ['NUL in the key', { topic: 't', payload: {}, key: 'a\u0000b' }, 'invalid-key'],
      ['NUL in the topic', { topic: 'a\u0000b', payload: {} }, 'invalid-topic'],
      ['NUL in the type', { topic: 't', type: 'a\u0000b', payload: {} }, 'invalid-type'],
      [
        'NUL in a header name',
        { topic: 't', payload: {}, headers: { 'a\u0000b': 'v' } },
        'invalid-header',
      ],
      [
        'NUL in a header value',
        { topic: 't', payload: {}, headers: { tenant: 'a\u0000b' } },
        'invalid-header',
      ],
      ['NUL in a payload string', { topic: 't', payload: { s: 'a\u0000b' } }, 'not-serialisable'],
      ['a lone surrogate in the key', { topic: 't', payload: {}, key: 'a\ud83d' }, 'invalid-key'],
      // Before: stored as {}, [1,null,3], null, or dropped.
      [
        'a Map in the payload',
        { topic: 't', payload: { m: new Map([['a', 1]]) } },
        'not-serialisable',
      ],
      ['a Set in the payload', { topic: 't', payload: { s: new Set([1]) } }, 'not-serialisable'],
      ['undefined in an array', { topic: 't', payload: [1, undefined, 3] }, 'not-serialisable'],
      ['an undefined property', { topic: 't', payload: { a: undefined } }, 'not-serialisable'],
      [
        'an invalid Date in the payload',
        { topic: 't', payload: { at: new Date('nope') } },
        'not-serialisable',
      ],
      ['Infinity in the payload', { topic: 't', payload: { n: Infinity } }, 'not-serialisable'],
      // Before: accepted; on SQLite '+010000-…' sorts before today, so it was due at once.
      [
        'an availableAt in year 10000',
        { topic: 't', payload: {}, availableAt: new Date('+010000-01-01T00:00:00Z') },
        'invalid-schedule',
      ],
      [
        'an availableAt before 1970',
        { topic: 't', payload: {}, availableAt: new Date(-1) },
        'invalid-schedule',
      ],
      [
        'a delayMs over 10 years',
        { topic: 't', payload: {}, delayMs: 3_650 * 86_400_000 + 1 },
        'invalid-schedule',
      ],
      // Before: the user function's own error escaped enqueue() untyped.
      ['a throwing key function', new KeyThrows(), 'invalid-key'],
      ['a throwing headers function', new HeadersThrow(), 'invalid-header'],
      // Binary messages (schema step 4).
      [
        'a contentType with a JSON payload',
        { topic: 't', payload: { n: 1 }, contentType: 'application/avro' },
        'not-serialisable',
      ],
      [
        'a contentType that is no media type',
        { topic: 't', payload: Buffer.from([1]), contentType: 'avro' },
        'invalid-content-type',
      ],
      [
        'an empty contentType',
        { topic: 't', payload: Buffer.from([1]), contentType: '' },
        'invalid-content-type',
      ],
      [
        'binary bytes over the limit',
        { topic: 't', payload: Buffer.alloc(1_025), contentType: 'application/octet-stream' },
        'payload-too-large',
      ],
      [
        'bytes without a contentType',
        { topic: 't', payload: new Uint8Array([1, 2]) },
        'not-serialisable',
      ],
      [
        'a binary event class without encode',
        new (class {
          static {
            OutboxEvent({ topic: 't', contentType: 'application/avro' })(this);
          }
        })(),
        'invalid-content-type',
      ],
      // Broker attributes.
      [
        'a RabbitMQ priority over 255',
        { topic: 't', payload: {}, attributes: { rabbitmq: { priority: 256 } } },
        'invalid-attributes',
      ],
      [
        'a negative RabbitMQ expiration',
        { topic: 't', payload: {}, attributes: { rabbitmq: { expiration: -1 } } },
        'invalid-attributes',
      ],
      [
        'a fractional Kafka partition',
        { topic: 't', payload: {}, attributes: { kafka: { partition: 1.5 } } },
        'invalid-attributes',
      ],
      [
        'a misspelt attribute',
        { topic: 't', payload: {}, attributes: { rabbitmq: { prority: 1 } } },
        'invalid-attributes',
      ],
      [
        'an unknown broker',
        { topic: 't', payload: {}, attributes: { sqls: { delay: 1 } } },
        'invalid-attributes',
      ],
      [
        'an SQS delay over 15 minutes',
        { topic: 't', payload: {}, attributes: { sqs: { delaySeconds: 901 } } },
        'invalid-attributes',
      ],
      [
        'an SQS message group with a space',
        { topic: 't', payload: {}, attributes: { sqs: { messageGroupId: 'a b' } } },
        'invalid-attributes',
      ],
      [
        'an SNS subject with a line break',
        { topic: 't', payload: {}, attributes: { sns: { subject: 'a\nb' } } },
        'invalid-attributes',
      ],
      [
        'a routing key over 255 bytes',
        { topic: 't', payload: {}, attributes: { rabbitmq: { routingKey: 'é'.repeat(128) } } },
        'invalid-attributes',
      ],
      [
        'an MQTT qos of 3',
        { topic: 't', payload: {}, attributes: { mqtt: { qos: 3 } } },
        'invalid-attributes',
      ],
    ];
    it.each(badInputs)(
      'rejects %s, rolling back the whole transaction',
      async (_name, input, reason) => {
        const customer = `bad-input-${randomUUID()}`;
        const attempt = scope.ds.transaction(async (m) => {
          await m.save(TestOrder, { customer });
          await outbox.enqueue([new OrderCreated('good', 1), input], m);
        });
        await expect(attempt).rejects.toBeInstanceOf(OutboxInvalidMessageError);
        await expect(attempt).rejects.toMatchObject({ reason, index: 1 });
        expect(await ordersOf(customer)).toBe(0);
        expect(await readOutbox(scope.ds, table)).toHaveLength(0);
      },
    );

    it('stores bytes with their content type and attributes as given, and JSON rows as before', async () => {
      const bytes = Buffer.from([0x00, 0xff, 0xfe, 0x80, 0x41]);
      const [binaryId, jsonId] = await scope.ds.transaction((m) =>
        outbox.enqueue(
          [
            {
              topic: 't',
              key: 'k',
              payload: new Uint8Array(bytes),
              contentType: 'application/x-protobuf',
              attributes: { rabbitmq: { priority: 9, routingKey: 'r' }, kafka: { partition: 0 } },
            },
            { topic: 't', key: 'k', payload: { n: 1 } },
          ],
          m,
        ),
      );
      const q = scope.ds.options.type === 'mariadb' ? `\`${table}\`` : `"${table}"`;
      const rows = await scope.ds.query<Record<string, unknown>[]>(
        `SELECT message_id, payload, payload_encoding, content_type, payload_bytes, broker_attributes FROM ${q} ORDER BY id`,
      );
      expect(rows).toHaveLength(2);
      const [binary, json] = rows;
      expect(messageIdText(binary?.message_id)).toBe(binaryId);
      expect(binary?.payload_encoding).toBe('binary');
      expect(binary?.content_type).toBe('application/x-protobuf');
      expect(Buffer.from(binary?.payload_bytes as Uint8Array).equals(bytes)).toBe(true);
      const attributes: unknown = binary?.broker_attributes;
      expect(typeof attributes === 'string' ? JSON.parse(attributes) : attributes).toEqual({
        rabbitmq: { priority: 9, routingKey: 'r' },
        kafka: { partition: 0 },
      });
      expect(messageIdText(json?.message_id)).toBe(jsonId);
      expect(json?.payload_encoding).toBe('json');
      expect([json?.content_type, json?.payload_bytes, json?.broker_attributes]).toEqual([
        null,
        null,
        null,
      ]);
    });

    it('keeps the cause of a throwing key function', async () => {
      const attempt = scope.ds.transaction((m) => outbox.enqueue(new KeyThrows(), m));
      await expect(attempt).rejects.toMatchObject({
        reason: 'invalid-key',
        cause: { message: 'key lookup failed' },
      });
      expect(await readOutbox(scope.ds, table)).toHaveLength(0);
    });

    it('stores an availableAt of 9999-12-31 as not due', async () => {
      await scope.ds.transaction((m) =>
        outbox.enqueue(
          { topic: 't', payload: {}, availableAt: new Date('9999-12-31T23:59:59.999Z') },
          m,
        ),
      );
      const t = scope.ds.options.type === 'mariadb' ? `\`${table}\`` : `"${table}"`;
      const later =
        scope.ds.options.type === 'postgres'
          ? "available_at > now() + interval '7000 years'"
          : scope.ds.options.type === 'mariadb'
            ? 'available_at > UTC_TIMESTAMP(6) + INTERVAL 7000 YEAR'
            : "available_at > strftime('%Y-%m-%d %H:%M:%f', 'now', '+7000 years')";
      const [{ n }] = await scope.ds.query<[{ n: string | number }]>(
        `SELECT COUNT(*) AS n FROM ${t} WHERE ${later}`,
      );
      expect(Number(n)).toBe(1);
    });

    it('schedules delayed messages on the database clock', async () => {
      await scope.ds.transaction((m) =>
        outbox.enqueue({ topic: 't', payload: {}, delayMs: 3_600_000 }, m),
      );
      const t = scope.ds.options.type === 'mariadb' ? `\`${table}\`` : `"${table}"`;
      const due =
        scope.ds.options.type === 'postgres'
          ? "available_at > now() + interval '59 minutes'"
          : scope.ds.options.type === 'mariadb'
            ? 'available_at > UTC_TIMESTAMP(6) + INTERVAL 59 MINUTE'
            : "available_at > strftime('%Y-%m-%d %H:%M:%f', 'now', '+59 minutes')";
      const [{ n }] = await scope.ds.query<[{ n: string | number }]>(
        `SELECT COUNT(*) AS n FROM ${t} WHERE ${due}`,
      );
      expect(Number(n)).toBe(1);
    });

    it('writes a scheduled and an unscheduled message of one call, each with its own due time', async () => {
      await scope.ds.transaction((m) =>
        outbox.enqueue(
          [
            { topic: 't', key: 'later', payload: {}, delayMs: 3_600_000 },
            { topic: 't', key: 'now', payload: {} },
            { topic: 't', key: 'at', payload: {}, availableAt: new Date('9999-12-31T00:00:00Z') },
          ],
          m,
        ),
      );
      const t = scope.ds.options.type === 'mariadb' ? `\`${table}\`` : `"${table}"`;
      const [dueNow, dueLater] =
        scope.ds.options.type === 'postgres'
          ? ['available_at <= now()', "available_at > now() + interval '59 minutes'"]
          : scope.ds.options.type === 'mariadb'
            ? [
                'available_at <= UTC_TIMESTAMP(6)',
                'available_at > UTC_TIMESTAMP(6) + INTERVAL 59 MINUTE',
              ]
            : [
                "available_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')",
                "available_at > strftime('%Y-%m-%d %H:%M:%f', 'now', '+59 minutes')",
              ];
      const rows = await scope.ds.query<{ message_key: string; due: number | string | boolean }[]>(
        `SELECT message_key, CASE WHEN ${dueNow} THEN 1 WHEN ${dueLater} THEN 2 ELSE 0 END AS due FROM ${t} ORDER BY id`,
      );
      expect(rows.map((r) => [r.message_key, Number(r.due)])).toEqual([
        ['later', 2],
        ['now', 1],
        ['at', 2],
      ]);
    });

    it('joins the ambient transaction of an AmbientTransaction adapter', async () => {
      // The same contract @nestjs-cls/transactional's TransactionHost fulfils.
      let active: import('typeorm').EntityManager | undefined;
      const host = {
        isTransactionActive: () => active !== undefined,
        get tx() {
          return active as import('typeorm').EntityManager;
        },
      };
      const ambient = await scope.open({
        table,
        options: { ambientTransaction: fromClsTransactionHost(host) },
      });
      const ambientOutbox = ambient.outbox;
      await scope.ds.transaction(async (m) => {
        active = m;
        await ambientOutbox.enqueue(new OrderCreated('ambient', 1));
        active = undefined;
      });
      await expect(ambientOutbox.enqueue(new OrderCreated('none', 1))).rejects.toBeInstanceOf(
        OutboxTransactionRequiredError,
      );
      await ambient.close();
      expect((await readOutbox(scope.ds, table)).map((r) => r.key)).toEqual(['ambient']);
    });
  });
}
