import { OutboxOptionsError } from '../../lib';
import { refuseUnknownKeys, unknownKeyOf } from '../../lib/internal/known-keys';
import { OptionChecks } from '../../lib/options/option-checks';
import { OutboxMessages } from '../../lib/outbox.messages';

// The one check behind every refusal of an unknown option key, at bootstrap and at run time.

const KNOWN = {
  '': { actor: true, reason: true, expected: true, auditTable: true },
  auditTable: { tableName: true, schema: true },
} as const;

describe('unknownKeyOf', () => {
  it('answers undefined when every key is known, at every level', () => {
    expect(unknownKeyOf({}, KNOWN)).toBeUndefined();
    expect(
      unknownKeyOf({ actor: 'a', expected: '1-x', auditTable: { tableName: 't' } }, KNOWN),
    ).toBeUndefined();
  });

  it('names an unknown top-level key, the option it likely meant and what is accepted', () => {
    expect(unknownKeyOf({ actor: 'a', expectd: '1-x' }, KNOWN)).toEqual({
      path: 'expectd',
      suggestion: 'expected',
      accepted: ['actor', 'reason', 'expected', 'auditTable'],
    });
  });

  it('gives no suggestion when nothing is close', () => {
    expect(unknownKeyOf({ expectedCount: 3 }, KNOWN)?.suggestion).toBeUndefined();
    expect(unknownKeyOf({ zzz: 1 }, KNOWN)).toEqual({
      path: 'zzz',
      suggestion: undefined,
      accepted: ['actor', 'reason', 'expected', 'auditTable'],
    });
  });

  it('names a key of a nested group by its path', () => {
    expect(unknownKeyOf({ auditTable: { tablename: 't' } }, KNOWN)).toEqual({
      path: 'auditTable.tablename',
      suggestion: 'auditTable.tableName',
      accepted: ['auditTable.tableName', 'auditTable.schema'],
    });
  });

  it('leaves values that are not objects to the callers’ own type checks', () => {
    for (const value of [undefined, null, 3, 'x', ['expectd']]) {
      expect(unknownKeyOf(value, KNOWN)).toBeUndefined();
    }
    expect(unknownKeyOf({ auditTable: 'x' }, KNOWN)).toBeUndefined();
  });
});

describe('refuseUnknownKeys', () => {
  it('throws what the caller makes of the unknown key, and nothing when all are known', () => {
    const refuse = jest.fn((u: { path: string }) => new RangeError(u.path));
    expect(() => refuseUnknownKeys({ actor: 'a' }, KNOWN, refuse)).not.toThrow();
    expect(refuse).not.toHaveBeenCalled();
    expect(() => refuseUnknownKeys({ actr: 'a' }, KNOWN, refuse)).toThrow(new RangeError('actr'));
  });

  it('says it at run time as the module says it at bootstrap, with the accepted keys', () => {
    expect(
      OutboxMessages.unknownRuntimeOption('OutboxAdmin.redrive()', 'expectd', 'expected', [
        'actor',
        'expected',
      ]),
    ).toBe(
      'Invalid OutboxAdmin.redrive() options: expectd is not an option; did you mean expected? ' +
        'Accepted options: actor, expected. Nothing was done.',
    );
    expect(OutboxMessages.unknownRuntimeOption('f()', 'zzz', undefined, ['a'])).toBe(
      'Invalid f() options: zzz is not an option. Accepted options: a. Nothing was done.',
    );
  });

  it('is what the module options use at bootstrap (OptionChecks.knownKeys)', () => {
    const checks = new OptionChecks('OutboxModule');
    expect(() => checks.knownKeys({ auditTable: { tablename: 't' } }, KNOWN)).toThrow(
      new OutboxOptionsError(
        'Invalid OutboxModule options: auditTable.tablename is not an option; did you mean auditTable.tableName?',
        'auditTable.tablename',
      ),
    );
  });
});
