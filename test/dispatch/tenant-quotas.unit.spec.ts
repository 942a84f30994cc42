import { tenantQuotas } from '../../lib/dispatch/poll/tenant-shares';

describe('tenantQuotas', () => {
  it('splits a batch in proportion to the weights, one row at least each, summing to the batch', () => {
    expect(tenantQuotas(12, ['bronze', 'gold'], new Map([['gold', 3]]))).toEqual([3, 9]);
    expect(tenantQuotas(10, ['a', 'b', 'c'], new Map())).toEqual([4, 3, 3]);
    expect(tenantQuotas(10, ['a', null], new Map([['a', 1000]]))).toEqual([9, 1]);
    for (const limit of [3, 4, 7, 100, 500]) {
      const quotas = tenantQuotas(limit, ['a', 'b', null], new Map([['b', 7]]));
      expect(quotas.reduce((x, y) => x + y, 0)).toBe(limit);
      expect(Math.min(...quotas)).toBeGreaterThanOrEqual(1);
    }
  });

  it('gives one row each to the first tenants when the batch is smaller than their number', () => {
    expect(tenantQuotas(2, ['a', 'b', 'c'], new Map())).toEqual([1, 1, 0]);
    expect(tenantQuotas(5, [], new Map())).toEqual([]);
  });
});
