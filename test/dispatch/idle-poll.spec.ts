import type { OutboxMessage } from '../../lib';
import { TEST_DATABASES } from '../support/databases';
import { useOutboxScope } from '../support/outbox-scope';
import { RecordingPublisher } from '../support/recording.publisher';
import { describeWith } from '../support/services';
import { CLAIM_LOOP } from '../support/test-claims';
import { sleep, waitFor } from '../support/wait-for';

// A drain begins with one read of whether anything is due (OutboxStore.hasDue), so that the
// polls of an idle dispatcher cost that read, not a claim's transaction (bench P8 counts the
// statements). What must hold with it: a drain with nothing due claims nothing, and a drain
// with due messages claims and publishes them, including messages that became due by time.

const msg = (n: number, delayMs?: number): OutboxMessage => ({
  topic: 'orders',
  type: 'order.event',
  key: `k${n}`,
  payload: { n },
  ...(delayMs === undefined ? {} : { delayMs }),
});

describe.each(TEST_DATABASES)('idle polls on $name', (db) => {
  describeWith(db.service === null ? [] : [db.service], `on ${db.name}`, () => {
    // The claim loop's read before its claim (partition owners read without a claim to spare).
    const scope = useOutboxScope(db, { tablePrefix: 'outbox_idle', options: CLAIM_LOOP });

    it('a drain with nothing due reads once and claims nothing; one with due messages publishes them', async () => {
      const app = await scope.open({ publisher: new RecordingPublisher() });
      const claim = jest.spyOn(app.store, 'claim');
      const hasDue = jest.spyOn(app.store as Required<typeof app.store>, 'hasDue');

      expect(await app.dispatcher.drain()).toBe(0);
      expect(hasDue).toHaveBeenCalledTimes(1);
      expect(claim).not.toHaveBeenCalled();

      // A scheduled message is not due: still no claim.
      const [later] = await app.enqueue(msg(1, 1_500));
      expect(await app.dispatcher.drain()).toBe(0);
      expect(claim).not.toHaveBeenCalled();

      const [now] = await app.enqueue(msg(2));
      expect(await app.dispatcher.drain()).toBe(1);
      expect(app.publisher.sentIds).toEqual([now]);

      // Once its time has come, the scheduled one is found by the same read.
      const wait = Math.max(0, await app.dueInMs(later as string)) + 50;
      await sleep(wait);
      expect(await app.dispatcher.drain()).toBe(1);
      expect(app.publisher.sentIds).toEqual([now, later]);
      expect((await app.rows()).map((r) => r.status)).toEqual(['delivered', 'delivered']);
    });

    it('a wake-up (a commit) claims at once, without the read first', async () => {
      const app = await scope.open({ publisher: new RecordingPublisher() });
      const claim = jest.spyOn(app.store, 'claim');
      const hasDue = jest.spyOn(app.store as Required<typeof app.store>, 'hasDue');
      const [id] = await app.enqueue(msg(3));
      app.dispatcher.wake();
      await waitFor('the message published', () => app.publisher.sentIds.length === 1);
      expect(app.publisher.sentIds).toEqual([id]);
      expect(claim).toHaveBeenCalled();
      expect(hasDue).not.toHaveBeenCalled();
    });
  });
});
