import { OutboxOptionsError } from '../../lib';
import {
  assertDelivery,
  checkDelivery,
  DispatcherProcess,
  FaultProxy,
  RecordingPublisher,
} from '../../lib/testing';

// The testing helpers refuse an options key they do not have (issue 75, item 15): a misspelt
// matcher field would match every message, a misspelt checkDelivery input would check nothing.

const refusal = (call: () => unknown): OutboxOptionsError => {
  try {
    call();
  } catch (error) {
    expect(error).toBeInstanceOf(OutboxOptionsError);
    return error as OutboxOptionsError;
  }
  throw new Error('not refused');
};

describe('testing helpers refuse unknown option keys', () => {
  it('RecordingPublisher: a matcher object and fail() options', () => {
    const publisher = new RecordingPublisher();
    const matcher = refusal(() => publisher.fail({ topc: 'orders' } as never, 'permanent'));
    expect(matcher.message).toBe(
      'Invalid RecordingPublisher matcher options: topc is not an option; did you mean topic? ' +
        'Accepted options: messageId, topic, key, type. Nothing was done.',
    );
    expect(matcher.option).toBe('topc');
    expect(refusal(() => publisher.messagesFor({ kye: 'a' } as never)).message).toContain(
      'did you mean key?',
    );
    expect(refusal(() => publisher.failNext('retryable', { time: 2 } as never)).message).toContain(
      'Invalid RecordingPublisher.fail() options: time is not an option; did you mean times?',
    );
    // Nothing was scripted by the refused calls, and the known forms still work.
    expect(publisher.fail({ topic: 'orders' }, 'permanent')).toBe(publisher);
    expect(publisher.messagesFor({ key: 'a' })).toEqual([]);
  });

  it('checkDelivery and assertDelivery: the input', () => {
    const input = { committed: [], received: [], rolledback: ['x'] } as never;
    expect(refusal(() => checkDelivery(input)).message).toContain(
      'checkDelivery() options: rolledback is not an option; did you mean rolledBack?',
    );
    expect(() => assertDelivery(input)).toThrow(OutboxOptionsError);
    expect(checkDelivery({ committed: [], received: [], rolledBack: [] }).ok).toBe(true);
  });

  it('FaultProxy.start and DispatcherProcess.start: refused before listening or forking', async () => {
    await expect(
      FaultProxy.start({ host: '127.0.0.1', port: 1 }, { lifetime: 5 } as never),
    ).rejects.toThrow(
      'Invalid FaultProxy.start() options: lifetime is not an option; did you mean lifetimeMs? ' +
        'Accepted options: lifetimeMs, listenHost. Nothing was done.',
    );
    await expect(
      DispatcherProcess.start({ script: '/nonexistent.js', readyTimeout: 5 } as never),
    ).rejects.toBeInstanceOf(OutboxOptionsError);
  });
});
