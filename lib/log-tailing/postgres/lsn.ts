/**
 * Compares two PostgreSQL LSNs written as `XXX/XXX` (hexadecimal high and low 32 bits):
 * negative, zero or positive as `a` is before, at or after `b`. Text comparison would put
 * `9/0` after `10/0`.
 */
export function compareLsn(a: string, b: string): number {
  const x = lsnValue(a);
  const y = lsnValue(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

function lsnValue(lsn: string): bigint {
  const [high = '0', low = '0'] = lsn.split('/');
  return (BigInt(`0x${high}`) << 32n) + BigInt(`0x${low}`);
}
