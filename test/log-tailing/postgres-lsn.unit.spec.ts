import { compareLsn, lsnBefore } from '../../lib/log-tailing/postgres/lsn';

// PostgreSQL LSNs as log tailing compares and acknowledges them (lib/log-tailing/postgres/lsn.ts).

describe('PostgreSQL LSNs', () => {
  it('compares by value, not as text', () => {
    expect(compareLsn('9/0', '10/0')).toBeLessThan(0);
    expect(compareLsn('A/FF', 'A/100')).toBeLessThan(0);
    expect(compareLsn('0/16B3748', '0/16B3748')).toBe(0);
    expect(compareLsn('1/0', '0/FFFFFFFF')).toBeGreaterThan(0);
  });

  it('gives the position before, carrying across the 32-bit halves (the client library adds one back)', () => {
    expect(lsnBefore('0/16B3748')).toBe('0/16B3747');
    expect(lsnBefore('1/0')).toBe('0/FFFFFFFF');
    expect(lsnBefore('0/0')).toBe('0/0');
  });
});
