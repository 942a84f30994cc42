import { toClaimedRecords, type ClaimedRow } from '../../lib/store/rows/outbox-row.mapper';
import {
  REDRIVE_LANE_KEY_HEADER,
  isRedriveLane,
  laneOf,
  redriveLaneOf,
  storedKeysOf,
} from '../../lib/store/rows/redrive-lane';

const row = (key: string | null, headers: Record<string, string>): ClaimedRow => ({
  id: '7',
  message_id: '01936d7a-0000-7000-8000-000000000001',
  topic: 'orders.replay',
  message_key: key,
  event_type: 'order.created',
  payload: '{}',
  headers: JSON.stringify(headers),
  attempts: 1,
  created_at: new Date(0),
  age_ms: 5,
  payload_encoding: 'json',
  content_type: null,
  payload_bytes: null,
  broker_attributes: null,
});

describe('re-drive lanes', () => {
  it('gives every copy of a key one lane, apart from every key, that fits the key column', () => {
    const lane = redriveLaneOf('order-42');
    expect(redriveLaneOf('order-42')).toBe(lane);
    expect(redriveLaneOf('order-43')).not.toBe(lane);
    expect(isRedriveLane(lane)).toBe(true);
    expect(isRedriveLane('order-42')).toBe(false);
    expect(isRedriveLane(null)).toBe(false);
    expect(redriveLaneOf('k'.repeat(255)).length).toBeLessThanOrEqual(255);
    expect(storedKeysOf('order-42')).toEqual(['order-42', lane]);
  });

  it("hands publishers a lane copy's key and headers without the lane's, and keeps the lane for ordering", () => {
    const lane = redriveLaneOf('order-42');
    const [record] = toClaimedRecords([
      row(lane, { [REDRIVE_LANE_KEY_HEADER]: 'order-42', 'x-outbox-redrive-id': 'r1' }),
    ]);
    expect(record?.key).toBe('order-42');
    expect(record?.headers).toEqual({ 'x-outbox-redrive-id': 'r1' });
    expect(record?.lane).toBe(lane);
    expect(record === undefined ? null : laneOf(record)).toBe(lane);
  });

  it('leaves a row stored under its key as it is, ordered by its key', () => {
    const [record] = toClaimedRecords([row('order-42', { tenant: 't1' })]);
    expect(record?.key).toBe('order-42');
    expect(record?.headers).toEqual({ tenant: 't1' });
    expect(record?.lane).toBeUndefined();
    expect(record === undefined ? null : laneOf(record)).toBe('order-42');
  });
});
