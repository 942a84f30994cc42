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

/**
 * The LSN before `lsn`, as `pg-logical-replication`'s `acknowledge()` takes it: it reports the
 * LSN it is given plus one, as the last byte handled. The protocol's flush position is the
 * first byte not yet handled, which is what the source means by a position; so the source
 * passes one less, and the server gets the position itself.
 */
export function lsnBefore(lsn: string): string {
  const value = lsnValue(lsn);
  const before = value > 0n ? value - 1n : 0n;
  return `${(before >> 32n).toString(16).toUpperCase()}/${(before & 0xffffffffn).toString(16).toUpperCase()}`;
}
