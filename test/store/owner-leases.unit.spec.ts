import {
  mysqlOwnerLockName,
  newOwnerKey,
  ownerHex,
  ownerKeyOf,
  ownerToken,
} from '../../lib/store/shared-sql/owner-leases';

// Owner lease tokens (ARCHITECTURE.md "Takeover after a crash"): what a takeover reads of them,
// and that nothing but 8 hex digits of a valid key ever reaches a statement or a lock name.
describe('owner lease tokens', () => {
  it('name the key in their first group and carry UUID version 8, unlike a random token', () => {
    const key = newOwnerKey();
    const token = ownerToken(key);
    expect(token).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(ownerKeyOf(token.slice(0, 8))).toBe(key);
    expect(ownerToken(key)).not.toBe(token);
  });

  it('keys are positive int4 values, written as 8 hex digits', () => {
    for (let i = 0; i < 100; i++) {
      const key = newOwnerKey();
      expect(key).toBeGreaterThanOrEqual(1);
      expect(key).toBeLessThanOrEqual(0x7fff_ffff);
      expect(ownerHex(key)).toMatch(/^[0-9a-f]{8}$/);
    }
    expect(ownerHex(1)).toBe('00000001');
    expect(mysqlOwnerLockName(0x1234)).toBe('nestjs-outbox-owner-00001234');
  });

  it('refuses anything else as a key', () => {
    for (const bad of [
      '',
      '0000000g',
      "1'; DROP",
      '80000000',
      '00000000',
      'ABCDEF12',
      '123456789',
    ]) {
      expect(ownerKeyOf(bad)).toBeUndefined();
    }
    expect(() => ownerHex(0)).toThrow(RangeError);
    expect(() => ownerHex(2 ** 31)).toThrow(RangeError);
    expect(() => ownerHex(1.5)).toThrow(RangeError);
  });
});
