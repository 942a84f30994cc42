import { TopicLogLimit } from '../../lib/dispatch/pipeline/topic-log-limit';

// One loud line per topic per interval: open → quiet (failures counted) → open again, saying how
// many were kept quiet meanwhile; topics apart.

describe('TopicLogLimit', () => {
  let now = 0;
  beforeEach(() => (now = 5_000));

  it('lets one failure per topic per interval be loud, and counts the quiet ones', () => {
    const limit = new TopicLogLimit(1_000, () => now);
    expect(limit.state('orders')).toBe('open');
    expect(limit.take('orders')).toEqual({ loud: true, quieted: 0 });
    expect(limit.state('orders')).toBe('quiet');
    expect(limit.take('orders')).toEqual({ loud: false });
    expect(limit.take('orders')).toEqual({ loud: false });
    expect(limit.take('payments')).toEqual({ loud: true, quieted: 0 });
    now += 999;
    expect(limit.take('orders')).toEqual({ loud: false });
    now += 1;
    expect(limit.state('orders')).toBe('open');
    expect(limit.take('orders')).toEqual({ loud: true, quieted: 3 });
    expect(limit.take('orders')).toEqual({ loud: false });
  });
});
