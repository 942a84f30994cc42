import { OnOutboxDeadLetter, OutboxOptionsError } from '../../lib';
import { getOutboxDeadLetterSubscriptions } from '../../lib/dispatch/fallback/on-outbox-dead-letter.decorator';

// @OnOutboxDeadLetter() refuses a key of its options it does not read when the class is
// defined: `{ outbx: 'audit' }` made a fallback of every instance instead of one.

describe('@OnOutboxDeadLetter() options', () => {
  it('refuses an unknown key when the class is defined, naming the key and the accepted ones', () => {
    const define = (): unknown => {
      class Fallbacks {
        @OnOutboxDeadLetter('payment.captured', { outbx: 'audit' } as never)
        refund(): void {}
      }
      return Fallbacks;
    };
    expect(define).toThrow(OutboxOptionsError);
    expect(define).toThrow(
      'Invalid @OnOutboxDeadLetter() options: outbx is not an option; did you mean outbox? ' +
        'Accepted options: outbox. Nothing was done.',
    );
  });

  it('takes its one option, or none', () => {
    class Fallbacks {
      @OnOutboxDeadLetter('payment.captured', { outbox: 'audit' })
      @OnOutboxDeadLetter('payment.refunded')
      refund(): void {}
    }
    expect(getOutboxDeadLetterSubscriptions(Fallbacks.prototype, 'refund')).toEqual([
      { type: 'payment.refunded', outbox: undefined },
      { type: 'payment.captured', outbox: 'audit' },
    ]);
  });
});
