import { toDate } from '../../lib/store/rows/outbox-row.mapper';

// A claimed row's created_at becomes the record's createdAt (RabbitMQ's timestamp, Kafka's
// header): every driver's form must parse, or the publish fails on NaN.

describe('toDate', () => {
  it.each([
    ['2026-11-23 17:48:24.918499+00', '2026-11-23T17:48:24.918Z'],
    ['2026-11-23 19:18:24.918+01:30', '2026-11-23T17:48:24.918Z'],
    ['2026-11-23 12:48:24-0500', '2026-11-23T17:48:24.000Z'],
    ['2026-11-23 17:48:24.918', '2026-11-23T17:48:24.918Z'],
    ['2026-11-23 17:48:24.918499', '2026-11-23T17:48:24.918Z'],
    ['2026-11-23T17:48:24.918Z', '2026-11-23T17:48:24.918Z'],
    ['2026-11-23 17:48:24+00', '2026-11-23T17:48:24.000Z'],
  ])('%s', (text, iso) => {
    expect(toDate(text).toISOString()).toBe(iso);
  });

  it('keeps a Date as it is', () => {
    const date = new Date();
    expect(toDate(date)).toBe(date);
  });
});

// PostgreSQL's claim answers milliseconds since the epoch as a double (date_part), a fraction
// of a microsecond off: cut to the millisecond the time is on, as the text forms are.
describe('toDate of milliseconds since the epoch', () => {
  it.each([
    [1_763_920_104_123, '2025-11-23T17:48:24.123Z'],
    [1_763_920_104_122.9998, '2025-11-23T17:48:24.123Z'],
    [1_763_920_104_123.75, '2025-11-23T17:48:24.123Z'],
    [1_763_920_104_123.4, '2025-11-23T17:48:24.123Z'],
  ])('%s', (ms, iso) => {
    expect(toDate(ms).toISOString()).toBe(iso);
  });
});
