import { randomBytes } from 'node:crypto';
import { masterKeyWrapper } from '../../lib/message/erasure/key-wrapper';
import { isSealed, openJson, sealPayload } from '../../lib/message/erasure/sealed-payload';
import { OutboxMessageSerializer } from '../../lib/message/outbox-message.serializer';
import { OutboxEvent } from '../../lib/message/outbox-event.decorator';
import { OutboxInvalidMessageError } from '../../lib/errors/outbox-invalid-message.error';
import { OutboxOptionsError } from '../../lib/errors/outbox-options.error';
import { resolveErasureOptions } from '../../lib/options/resolve-erasure-options';

// The pure parts of per-subject erasure (docs/erasure.md): what enqueue resolves of `personal`,
// the sealed form of a payload and its binding to key and field, the master key's wrapping, and
// the option's checks at bootstrap.

@OutboxEvent({
  topic: 'users',
  key: 'userId',
  personal: { subject: 'userId', fields: ['email'] },
})
class UserRegistered {
  constructor(
    readonly userId: string,
    readonly email: string,
    readonly plan: string,
  ) {}
}

describe('personal data at enqueue', () => {
  const serializer = new OutboxMessageSerializer(1_000_000);

  it('resolves the subject and fields of an event and of a plain message', () => {
    expect(serializer.toRow(new UserRegistered('u-1', 'a@example.org', 'pro'), 0).personal).toEqual(
      {
        subject: 'u-1',
        fields: ['email'],
      },
    );
    expect(
      serializer.toRow({ topic: 't', payload: { a: 1 }, personal: { subject: 's' } }, 0).personal,
    ).toEqual({ subject: 's', fields: null });
    expect(serializer.toRow({ topic: 't', payload: { a: 1 } }, 0).personal).toBeUndefined();
  });

  it.each([
    [{ subject: '' }, 'subject'],
    [{ subject: 's', fields: [] }, 'fields'],
    [{ subject: 's', fields: [''] }, 'fields'],
    ['s', 'expected { subject, fields? }'],
    // Misspelt, `fields` would be missing and the whole payload sealed.
    [{ subject: 's', field: ['email'] }, 'field is not a key of it; did you mean fields?'],
  ])('refuses personal %j with a typed error', (personal, words) => {
    const error = (() => {
      try {
        serializer.toRow({ topic: 't', payload: {}, personal }, 0);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(OutboxInvalidMessageError);
    expect((error as OutboxInvalidMessageError).reason).toBe('invalid-personal');
    expect((error as Error).message).toContain(words);
  });

  it('refuses personal data in a binary payload', () => {
    expect(() =>
      serializer.toRow(
        {
          topic: 't',
          payload: Buffer.from('x'),
          contentType: 'application/x',
          personal: { subject: 's' },
        },
        0,
      ),
    ).toThrow(/JSON payloads only/);
  });
});

describe('the sealed payload', () => {
  const key = randomBytes(32);

  it('seals the named fields only, each bound to its key and field', () => {
    const sealed = JSON.parse(
      sealPayload(
        JSON.stringify({ email: 'a@example.org', plan: 'pro' }),
        ['email', 'absent'],
        key,
        'k1',
      ),
    ) as Record<string, { $outboxSealed: string } | string>;
    expect(sealed.plan).toBe('pro');
    expect(Object.keys(sealed)).toEqual(['email', 'plan']);
    expect(isSealed(sealed.email)).toBe(true);
    const value = (sealed.email as { $outboxSealed: string }).$outboxSealed;
    expect(JSON.stringify(sealed)).not.toContain('a@example.org');
    expect(openJson(key, 'k1', 'email', value)).toBe('"a@example.org"');
    expect(() => openJson(key, 'k1', 'plan', value)).toThrow();
    expect(() => openJson(key, 'k2', 'email', value)).toThrow();
    expect(() => openJson(randomBytes(32), 'k1', 'email', value)).toThrow();
  });

  it('seals the whole payload without fields, or when the payload has none', () => {
    for (const [payload, fields] of [
      [{ a: 1 }, null],
      [[1, 2], ['a']],
    ] as const) {
      const sealed = JSON.parse(sealPayload(JSON.stringify(payload), fields, key, 'k1')) as unknown;
      expect(isSealed(sealed)).toBe(true);
      expect(
        JSON.parse(openJson(key, 'k1', null, (sealed as { $outboxSealed: string }).$outboxSealed)),
      ).toEqual(payload);
    }
  });
});

describe('the master key wrapper and the erasure option', () => {
  it('wraps a data key so that only the same master key and key id unwrap it', async () => {
    const master = masterKeyWrapper(randomBytes(32));
    const dataKey = randomBytes(32);
    const wrapped = await master.wrap(dataKey, 'k1');
    expect(wrapped.includes(dataKey)).toBe(false);
    expect((await master.unwrap(wrapped, 'k1')).equals(dataKey)).toBe(true);
    await expect(master.unwrap(wrapped, 'k2')).rejects.toThrow();
    await expect(masterKeyWrapper(randomBytes(32)).unwrap(wrapped, 'k1')).rejects.toThrow();
  });

  it('takes a 32-byte master key as bytes or base64, or a wrapper; refuses the rest at bootstrap without echoing the key', () => {
    const key = randomBytes(32);
    expect(resolveErasureOptions({ masterKey: key })).not.toBeNull();
    expect(resolveErasureOptions({ masterKey: key.toString('base64') })).not.toBeNull();
    expect(resolveErasureOptions(undefined)).toBeNull();
    const wrapper = masterKeyWrapper(key);
    expect(resolveErasureOptions({ keyWrapper: wrapper })?.keyWrapper).toBe(wrapper);
    const secret = 'c2hvcnQtc2VjcmV0LXZhbHVl';
    for (const options of [
      {},
      { masterKey: key, keyWrapper: wrapper },
      { masterKey: secret },
      { masterKey: 'not base64!' },
      { keyWrapper: { wrap: 1 } },
    ]) {
      let error: unknown;
      try {
        resolveErasureOptions(options as never);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(OutboxOptionsError);
      expect((error as Error).message).not.toContain(secret);
    }
  });
});
