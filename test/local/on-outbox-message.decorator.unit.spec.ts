import { OnOutboxMessage, OutboxOptionsError } from '../../lib';
import { getOutboxHandlerSubscriptions } from '../../lib/publishers/local/on-outbox-message.decorator';

// @OnOutboxMessage() refuses a key of its options it does not read when the class is defined:
// `{ topic: 'orders', typ: 'order.created' }` handled every message of the topic.

describe('@OnOutboxMessage() options', () => {
  it('refuses an unknown key when the class is defined, naming the key and the accepted ones', () => {
    const define = (): unknown => {
      class Handlers {
        @OnOutboxMessage({ topic: 'orders', typ: 'order.created' } as never)
        on(): void {}
      }
      return Handlers;
    };
    expect(define).toThrow(OutboxOptionsError);
    expect(define).toThrow(
      'Invalid @OnOutboxMessage() options: typ is not an option; did you mean type? ' +
        'Accepted options: topic, type. Nothing was done.',
    );
  });

  it('says a misspelt topic is one, rather than that the topic is missing', () => {
    expect(() => OnOutboxMessage({ topc: 'orders' } as never)).toThrow(
      'topc is not an option; did you mean topic?',
    );
  });

  it('takes a topic, or a topic and a type', () => {
    class Handlers {
      @OnOutboxMessage('orders')
      @OnOutboxMessage({ topic: 'parcels', type: 'parcel.sent' })
      on(): void {}
    }
    expect(getOutboxHandlerSubscriptions(Handlers.prototype, 'on')).toEqual([
      { topic: 'parcels', type: 'parcel.sent' },
      { topic: 'orders' },
    ]);
  });
});
