import { randomFillSync } from 'node:crypto';

// Random bytes are drawn in blocks: one syscall per 256 ids instead of one per id.
const POOL_SIZE = 16 * 256;

/** Generates RFC 9562 version 7 UUIDs: time-ordered, so they index well and sort by creation. */
export class UuidV7Generator {
  private readonly pool = Buffer.allocUnsafe(POOL_SIZE);
  private offset = POOL_SIZE;

  next(now: number = Date.now()): string {
    if (this.offset + 10 > POOL_SIZE) {
      randomFillSync(this.pool);
      this.offset = 0;
    }
    const bytes = Buffer.allocUnsafe(16);
    bytes.writeUIntBE(now, 0, 6);
    this.pool.copy(bytes, 6, this.offset, this.offset + 10);
    this.offset += 10;
    bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x70;
    bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80;
    const hex = bytes.toString('hex');
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }
}
