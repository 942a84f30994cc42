import { DataSource } from 'typeorm';
import { OutboxOptionsError } from '../../lib';
import { ensureInboxTable, Inbox, isPermanentInboxError } from '../../lib/inbox';

// The entry handed to handleOnce() and recordOnce() refuses a key it does not have, as every
// options object does: a misspelt `messageID` was refused as a missing messageId (an
// InvalidInboxEntryError that isPermanentInboxError counts as the message's fault, so every
// message was rejected), and a misspelt `sequnce` handled the message without its gap guard.
// In-memory SQLite: no service needed, and the table shows that nothing was recorded.

/** The error a call fails with, or an Error saying it did not fail. */
async function failureOf(call: () => Promise<unknown>): Promise<unknown> {
  try {
    await call();
  } catch (error) {
    return error;
  }
  return new Error('not refused');
}

describe('the keys of an inbox entry', () => {
  let ds: DataSource;
  let inbox: Inbox;

  const recorded = async (): Promise<string[]> =>
    (await ds.query<{ id: string }[]>('SELECT message_id AS id FROM inbox ORDER BY 1')).map(
      (r) => r.id,
    );

  beforeAll(async () => {
    ds = await new DataSource({ type: 'better-sqlite3', database: ':memory:' }).initialize();
    await ensureInboxTable(ds);
    inbox = new Inbox(ds);
  });

  afterAll(async () => {
    await ds.destroy();
  });

  beforeEach(async () => {
    await ds.query('DELETE FROM inbox');
  });

  it('handleOnce() refuses a misspelt messageId as the caller’s error, not the message’s', async () => {
    const handler = jest.fn(() => Promise.resolve());
    const error = await failureOf(() =>
      inbox.handleOnce(ds, { messageID: 'm-1', consumer: 'billing' } as never, handler),
    );
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect(error).toMatchObject({
      option: 'messageID',
      message:
        'Invalid Inbox.handleOnce() entry options: messageID is not an option; did you mean ' +
        'messageId? Accepted options: messageId, consumer, sequence. Nothing was done.',
    });
    // Rejecting the message without requeue would drop every message: this one is not permanent.
    expect(isPermanentInboxError(error)).toBe(false);
    expect(handler).not.toHaveBeenCalled();
    expect(await recorded()).toEqual([]);
  });

  it('handleOnce() refuses a misspelt sequence instead of handling the message unguarded', async () => {
    const handler = jest.fn(() => Promise.resolve());
    const entry = { messageId: 'm-2', consumer: 'billing', sequnce: { key: 'k', sequence: 1 } };
    // A variable, not a literal: TypeScript lets the extra key through, as it would in an app.
    const error = await failureOf(() => inbox.handleOnce(ds, entry, handler));
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect(error).toMatchObject({ option: 'sequnce' });
    expect((error as Error).message).toContain('did you mean sequence?');
    expect(handler).not.toHaveBeenCalled();
    expect(await recorded()).toEqual([]);
  });

  it('recordOnce() refuses an unknown key and records nothing', async () => {
    const error = await failureOf(() =>
      ds.transaction((tx) =>
        inbox.recordOnce(tx, { messageId: 'm-3', consumer: 'billing', topic: 'orders' } as never),
      ),
    );
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect(error).toMatchObject({
      option: 'topic',
      message:
        'Invalid Inbox.recordOnce() entry options: topic is not an option. Accepted options: ' +
        'messageId, consumer, sequence. Nothing was done.',
    });
    expect(await recorded()).toEqual([]);
  });

  it('takes the known keys, a sequence given, null or left out', async () => {
    const handled = await inbox.handleOnce(
      ds,
      { messageId: 'm-4', consumer: 'billing', sequence: { key: 'k', sequence: 1 } },
      () => Promise.resolve('done'),
    );
    expect(handled).toMatchObject({ handled: true, result: 'done', sequence: { status: 'next' } });
    await inbox.handleOnce(ds, { messageId: 'm-5', consumer: 'billing', sequence: null }, () =>
      Promise.resolve(),
    );
    await inbox.handleOnce(ds, { messageId: 'm-6', consumer: 'billing' }, () => Promise.resolve());
    expect(
      await ds.transaction((tx) => inbox.recordOnce(tx, { messageId: 'm-7', consumer: 'billing' })),
    ).toBe(true);
    expect(await recorded()).toEqual(['m-4', 'm-5', 'm-6', 'm-7']);
  });

  it('reads own keys only, as every options check does: an inherited one is not the entry’s', async () => {
    const entry = Object.assign(Object.create({ inherited: true }) as object, {
      messageId: 'm-8',
      consumer: 'billing',
    });
    expect((await inbox.handleOnce(ds, entry, () => Promise.resolve())).handled).toBe(true);
    expect(await recorded()).toEqual(['m-8']);
  });
});
