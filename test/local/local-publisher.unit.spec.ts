import { Injectable, Scope } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import {
  LocalPublisher,
  OnOutboxMessage,
  OutboxHandlerMissingError,
  OutboxHandlersModule,
  OutboxOptionsError,
  PermanentPublishError,
  type OutboxHandlerMessage,
  type JsonOutboxRecord,
  type OutboxRecord,
} from '../../lib';
import { sleep } from '../support/wait-for';

// The in-process publisher on a real Nest app context: handlers discovered on providers, outcomes
// as the dispatcher reads them. (Delivery after commit, retries and dead letters on real databases
// are in test/local.)

let seq = 0;
function record(topic: string, fields: Partial<JsonOutboxRecord> = {}): OutboxRecord {
  seq += 1;
  return {
    id: String(seq),
    messageId: `m-${seq}`,
    topic,
    key: null,
    type: 'order.created',
    payload: JSON.stringify({ n: seq }),
    headers: { 'x-tenant': 't1' },
    attempts: 1,
    createdAt: new Date(0),
    ...fields,
  };
}

@Injectable()
class Billing {
  readonly seen: OutboxHandlerMessage<{ n: number }>[] = [];
  @OnOutboxMessage('orders')
  async onOrder(message: OutboxHandlerMessage<{ n: number }>): Promise<void> {
    await sleep(1);
    this.seen.push(message);
  }
}

@Injectable()
class Shipping {
  readonly seen: string[] = [];
  failNext: Error | undefined = undefined;
  @OnOutboxMessage({ topic: 'orders', type: 'order.created' })
  onCreated(message: OutboxHandlerMessage): void {
    if (this.failNext !== undefined) {
      const error = this.failNext;
      this.failNext = undefined;
      throw error;
    }
    this.seen.push(message.messageId);
  }

  @OnOutboxMessage({ topic: 'parcels', type: 'parcel.sent' })
  @OnOutboxMessage('returns')
  onParcelOrReturn(message: OutboxHandlerMessage): void {
    this.seen.push(`${message.topic}:${message.messageId}`);
  }
}

@Injectable()
class Thumbnails {
  readonly seen: OutboxHandlerMessage<Buffer>[] = [];
  @OnOutboxMessage('images')
  onImage(message: OutboxHandlerMessage<Buffer>): void {
    // A handler writing into its bytes must not change what another handler gets.
    const mine = message.payload;
    this.seen.push({ ...message, payload: Buffer.from(mine) });
    mine.fill(0);
  }

  @OnOutboxMessage('images')
  onImageToo(message: OutboxHandlerMessage<Buffer>): void {
    this.seen.push({ ...message, payload: Buffer.from(message.payload) });
  }
}

async function open(providers: unknown[], concurrency?: number): Promise<TestingModule> {
  const moduleRef = await Test.createTestingModule({
    imports: [OutboxHandlersModule.forRoot(concurrency === undefined ? {} : { concurrency })],
    providers: providers as never[],
  }).compile();
  moduleRef.useLogger(false);
  await moduleRef.init();
  return moduleRef;
}

describe('LocalPublisher (unit)', () => {
  let moduleRef: TestingModule;
  afterEach(async () => moduleRef?.close());

  it('finds the handlers on providers and gives each its parsed message; a message counts as delivered when all its handlers resolved', async () => {
    moduleRef = await open([Billing, Shipping]);
    const local = moduleRef.get(LocalPublisher);
    expect(local.topics().sort()).toEqual(['orders', 'parcels', 'returns']);
    expect(local.handles('orders')).toBe(true);
    expect(local.handles('invoices')).toBe(false);

    const created = record('orders', { key: 'o-1', attempts: 2 });
    const shipped = record('orders', { type: 'order.shipped' });
    const parcel = record('parcels', { type: 'parcel.sent' });
    const back = record('returns', { type: 'anything' });
    const outcomes = await local.publish(
      [created, shipped, parcel, back],
      new AbortController().signal,
    );
    expect(outcomes).toEqual([{ ok: true }, { ok: true }, { ok: true }, { ok: true }]);

    const billing = moduleRef.get(Billing);
    const shipping = moduleRef.get(Shipping);
    // Billing takes every type of the topic; Shipping's orders handler only order.created.
    expect(billing.seen.map((m) => m.messageId).sort()).toEqual(
      [created.messageId, shipped.messageId].sort(),
    );
    expect(shipping.seen).toEqual(
      expect.arrayContaining([
        created.messageId,
        `parcels:${parcel.messageId}`,
        `returns:${back.messageId}`,
      ]),
    );
    expect(shipping.seen).toHaveLength(3);
    const got = billing.seen.find((m) => m.messageId === created.messageId);
    expect(got).toMatchObject({
      topic: 'orders',
      key: 'o-1',
      type: 'order.created',
      payload: JSON.parse(String(created.payload)) as unknown,
      rawPayload: created.payload,
      headers: { 'x-tenant': 't1' },
      attempts: 2,
    });
    expect(got?.signal).toBeInstanceOf(AbortSignal);
  });

  it('hands a binary message to each handler as its own copy of the bytes, with the content type', async () => {
    moduleRef = await open([Thumbnails]);
    const local = moduleRef.get(LocalPublisher);
    const bytes = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0xff]);
    const binary: OutboxRecord = {
      ...record('images'),
      encoding: 'binary',
      payload: bytes,
      contentType: 'image/png',
    };
    expect(await local.publish([binary], new AbortController().signal)).toEqual([{ ok: true }]);
    const seen = moduleRef.get(Thumbnails).seen;
    expect(seen).toHaveLength(2);
    for (const m of seen) {
      expect(m.payload.equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0xff]))).toBe(true);
      expect(m.contentType).toBe('image/png');
      expect(Buffer.isBuffer(m.rawPayload)).toBe(true);
    }
    expect(bytes.equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0xff]))).toBe(true);
  });

  it('fails a message whose handler threw, and only that message; a PermanentPublishError stays permanent', async () => {
    moduleRef = await open([Billing, Shipping]);
    const local = moduleRef.get(LocalPublisher);
    const shipping = moduleRef.get(Shipping);
    const boom = new Error('inventory down');
    shipping.failNext = boom;
    const [first, second] = await local.publish(
      [record('orders', { key: 'a' }), record('orders', { key: 'a' })],
      new AbortController().signal,
    );
    expect(first).toEqual({ ok: false, error: boom });
    expect(second).toEqual({ ok: true });

    const never = new PermanentPublishError('not an order we know');
    shipping.failNext = never;
    const [dead] = await local.publish([record('orders')], new AbortController().signal);
    expect(dead).toEqual({ ok: false, error: never });
  });

  it('never counts a message nobody handles as delivered: no handler for its topic, or for its type', async () => {
    moduleRef = await open([Shipping]);
    const local = moduleRef.get(LocalPublisher);
    const [noTopic, noType, notJson] = await local.publish(
      [
        record('invoices'),
        record('parcels', { type: 'parcel.lost' }),
        record('returns', { payload: '{oops' }),
      ],
      new AbortController().signal,
    );
    expect(noTopic?.ok).toBe(false);
    const topicError = (noTopic as { error: unknown }).error;
    expect(topicError).toBeInstanceOf(OutboxHandlerMissingError);
    expect(topicError).toBeInstanceOf(PermanentPublishError);
    expect(String(topicError)).toContain('No @OnOutboxMessage() handler for topic "invoices"');
    const typeError = (noType as { error: unknown }).error;
    expect(typeError).toBeInstanceOf(OutboxHandlerMissingError);
    expect(String(typeError)).toContain('type "parcel.lost" of topic "parcels"');
    expect((notJson as { error: unknown }).error).toBeInstanceOf(PermanentPublishError);
    expect(moduleRef.get(Shipping).seen).toEqual([]);
  });

  it('hands the messages of one key over one at a time in order, other keys side by side', async () => {
    const events: string[] = [];
    let running = 0;
    let most = 0;
    @Injectable()
    class Slow {
      @OnOutboxMessage('t')
      async on(message: OutboxHandlerMessage<{ n: number }>): Promise<void> {
        running += 1;
        most = Math.max(most, running);
        events.push(`start ${message.key ?? '-'}${message.payload.n}`);
        await sleep(20);
        events.push(`end ${message.key ?? '-'}${message.payload.n}`);
        running -= 1;
      }
    }
    moduleRef = await open([Slow], 10);
    const batch = [
      record('t', { key: 'a', payload: '{"n":1}' }),
      record('t', { key: 'b', payload: '{"n":1}' }),
      record('t', { key: 'a', payload: '{"n":2}' }),
      record('t', { key: 'b', payload: '{"n":2}' }),
      record('t', { key: 'a', payload: '{"n":3}' }),
    ];
    const outcomes = await moduleRef
      .get(LocalPublisher)
      .publish(batch, new AbortController().signal);
    expect(outcomes.every((o) => o.ok)).toBe(true);
    // a and b ran side by side, never two of one key.
    expect(most).toBe(2);
    const ofA = events.filter((e) => e.endsWith('a1') || e.endsWith('a2') || e.endsWith('a3'));
    expect(ofA).toEqual(['start a1', 'end a1', 'start a2', 'end a2', 'start a3', 'end a3']);
  });

  it('runs at most `concurrency` handler calls at once', async () => {
    let running = 0;
    let most = 0;
    @Injectable()
    class Counting {
      @OnOutboxMessage('t')
      async on(): Promise<void> {
        running += 1;
        most = Math.max(most, running);
        await sleep(10);
        running -= 1;
      }
    }
    moduleRef = await open([Counting], 3);
    const batch = Array.from({ length: 12 }, (_, i) => record('t', { key: `k${i}` }));
    const outcomes = await moduleRef
      .get(LocalPublisher)
      .publish(batch, new AbortController().signal);
    expect(outcomes.every((o) => o.ok)).toBe(true);
    expect(most).toBe(3);
  });

  it('starts nothing more once the signal aborted and gives the running handler the abort', async () => {
    let aborted: unknown;
    const started: number[] = [];
    @Injectable()
    class Hanging {
      @OnOutboxMessage('t')
      on(message: OutboxHandlerMessage<{ n: number }>): Promise<void> {
        started.push(message.payload.n);
        return new Promise((_, reject) => {
          message.signal.addEventListener('abort', () => {
            aborted = message.signal.reason;
            reject(message.signal.reason as Error);
          });
        });
      }
    }
    moduleRef = await open([Hanging]);
    const controller = new AbortController();
    const publishing = moduleRef
      .get(LocalPublisher)
      .publish(
        [
          record('t', { key: 'k', payload: '{"n":1}' }),
          record('t', { key: 'k', payload: '{"n":2}' }),
        ],
        controller.signal,
      );
    await sleep(20);
    const reason = new Error('publish timed out');
    controller.abort(reason);
    const outcomes = await publishing;
    expect(aborted).toBe(reason);
    expect(started).toEqual([1]);
    expect(outcomes.map((o) => o.ok)).toEqual([false, false]);
  });

  it('refuses at bootstrap a handler on a request-scoped provider, which has no instance to deliver to', async () => {
    @Injectable({ scope: Scope.REQUEST })
    class PerRequest {
      @OnOutboxMessage('orders')
      on(): void {}
    }
    await expect(open([PerRequest])).rejects.toThrow(OutboxOptionsError);
    await expect(open([PerRequest])).rejects.toThrow('PerRequest.on');
  });

  it('refuses bad decorator arguments and options when they are written', () => {
    expect(() => OnOutboxMessage('')).toThrow(OutboxOptionsError);
    expect(() => OnOutboxMessage({ topic: 'orders', type: '' })).toThrow(OutboxOptionsError);
    expect(() => OutboxHandlersModule.forRoot({ concurrency: 0 })).toThrow(OutboxOptionsError);
    expect(() => OutboxHandlersModule.forRoot({ concurency: 2 } as never)).toThrow(
      'did you mean concurrency',
    );
  });
});
