import { ConsoleInputError } from '../../lib/operations/console/console-input';
import {
  redriveFilter,
  redriveFilterParams,
  redriveRate,
} from '../../lib/operations/console/console-redrive-input';

// The Re-drive form's fields: what reaches OutboxAdmin.redrive, and what is refused with 400.

describe('console re-drive input', () => {
  it('takes the given fields only, times from datetime-local as UTC or ISO with a zone', () => {
    expect(redriveFilter({})).toEqual({});
    expect(redriveFilter({ topic: ' orders ', key: '', type: undefined })).toEqual({
      topic: 'orders',
    });
    const filter = redriveFilter({
      key: 'k-1',
      createdAfter: '2026-11-27T10:00',
      deliveredBefore: '2026-11-27T12:30:00+02:00',
    });
    expect(filter).toEqual({
      key: 'k-1',
      createdAfter: new Date('2026-11-27T10:00:00.000Z'),
      deliveredBefore: new Date('2026-11-27T10:30:00.000Z'),
    });
    expect(redriveFilterParams(filter)).toEqual([
      ['key', 'k-1'],
      ['createdAfter', '2026-11-27T10:00:00.000Z'],
      ['deliveredBefore', '2026-11-27T10:30:00.000Z'],
    ]);
    // The hidden fields of the confirmation give the same filter back.
    expect(redriveFilter(Object.fromEntries(redriveFilterParams(filter)))).toEqual(filter);
  });

  it('refuses a time that is not one, a repeated field and a bad rate', () => {
    for (const bad of [
      { createdAfter: 'yesterday' },
      { deliveredAfter: '2026-13-45T99:00' },
      { topic: ['a', 'b'] },
      { createdBefore: '1700000000' },
    ]) {
      expect(() => redriveFilter(bad)).toThrow(ConsoleInputError);
    }
    expect(redriveRate({})).toBeUndefined();
    expect(redriveRate({ rate: '2.5' })).toBe(2.5);
    for (const rate of ['0', '-1', 'fast', '1e3']) {
      expect(() => redriveRate({ rate })).toThrow(ConsoleInputError);
    }
  });
});
