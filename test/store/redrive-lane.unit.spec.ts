import { createHash } from 'node:crypto';
import { toClaimedRecords, type ClaimedRow } from '../../lib/store/rows/outbox-row.mapper';
import {
  REDRIVE_LANE_KEY_HEADER,
  isRedriveLane,
  keyLaneOf,
  laneOf,
  redriveLaneOf,
  storedKeyCondition,
  storedKeysOf,
} from '../../lib/store/rows/redrive-lane';
import { SqlParams } from '../../lib/store/shared-sql/sql-params';

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
  it('gives the copies of one key to one destination one lane, apart from every key and every other destination, that fits the key column', () => {
    const lane = redriveLaneOf('a.replay', 'order-42');
    expect(redriveLaneOf('a.replay', 'order-42')).toBe(lane);
    expect(redriveLaneOf('a.replay', 'order-43')).not.toBe(lane);
    expect(redriveLaneOf('b.replay', 'order-42')).not.toBe(lane);
    expect(isRedriveLane(lane)).toBe(true);
    expect(isRedriveLane('order-42')).toBe(false);
    expect(isRedriveLane(null)).toBe(false);
    expect(redriveLaneOf('t'.repeat(255), 'k'.repeat(255)).length).toBeLessThanOrEqual(255);
  });

  it("finds a key's rows by the key, the one lane of older builds and every destination's lane, with no wildcard but the last", () => {
    const old = keyLaneOf('order-42');
    // Older builds' lane, kept as the start of each destination's.
    expect(old).toBe(
      `\u0001redrive-lane:${createHash('sha256').update('nestjs-outbox:redrive-lane:order-42').digest('hex')}`,
    );
    const { exact, lanes } = storedKeysOf('order-42');
    expect(exact).toEqual(['order-42', old]);
    expect(lanes).toBe(`${old}:%`);
    expect(lanes.slice(0, -1)).not.toMatch(/[%_\\]/);
    for (const destination of ['a.replay', 'b.replay']) {
      expect(redriveLaneOf(destination, 'order-42').startsWith(lanes.slice(0, -1))).toBe(true);
    }
    expect(redriveLaneOf('a.replay', 'order-43').startsWith(lanes.slice(0, -1))).toBe(false);
    const p = new SqlParams('numbered');
    expect(storedKeyCondition(p, 'order-42')).toBe(
      '(o.message_key IN ($1, $2) OR o.message_key LIKE $3)',
    );
    expect(p.values).toEqual(['order-42', old, `${old}:%`]);
  });

  it("hands publishers a lane copy's key and headers without the lane's, and keeps the lane for ordering", () => {
    const lane = redriveLaneOf('orders.replay', 'order-42');
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
