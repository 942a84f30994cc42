import { queuePolicyOf } from '../../lib/options/queue-policy';
import {
  andDeadRowSkips,
  blockingCondition,
  deadRowBlocks,
  someDeadSkip,
} from '../../lib/store/shared-sql/dead-blocking';
import { eventTypeFilter } from '../../lib/store/shared-sql/event-type-filter';

describe('dead rows that block their key, as SQL', () => {
  it('is the plain status list when no policy changes onDeadLetter', () => {
    const block = queuePolicyOf({ onDeadLetter: 'block' });
    const skip = queuePolicyOf({ onDeadLetter: 'skip' });
    expect(blockingCondition('e', block)).toBe(`e.status IN ('pending', 'waiting', 'dead')`);
    expect(blockingCondition('', skip)).toBe(`status IN ('pending', 'waiting')`);
    expect(andDeadRowSkips('d', skip)).toBe('');
    expect([someDeadSkip(block), someDeadSkip(skip)]).toEqual([false, true]);
  });

  it("decides a dead row by its type where a type's policy differs from the module's", () => {
    const block = queuePolicyOf({ onDeadLetter: 'block', deadLetterExceptions: ['cache.x'] });
    const skip = queuePolicyOf({ onDeadLetter: 'skip', deadLetterExceptions: ['pay.a', 'pay.b'] });
    expect(blockingCondition('e', block)).toBe(
      `(e.status IN ('pending', 'waiting') OR (e.status = 'dead' AND e.event_type NOT IN ('cache.x')))`,
    );
    expect(deadRowBlocks('', skip)).toBe(`event_type IN ('pay.a', 'pay.b')`);
    expect(andDeadRowSkips('d', skip)).toBe(` AND NOT (d.event_type IN ('pay.a', 'pay.b'))`);
    expect(someDeadSkip(block)).toBe(true);
  });

  it('refuses to write a type name that would need escaping, whatever reached it', () => {
    const policy = queuePolicyOf({ onDeadLetter: 'block', deadLetterExceptions: ["x') OR ('1"] });
    expect(() => blockingCondition('e', policy)).toThrow(/cannot be written into SQL/);
    expect(() => eventTypeFilter({ only: "a'b" })).toThrow(/cannot be written into SQL/);
    expect(eventTypeFilter({ except: ['a', 'b.c'] })).toBe(` AND event_type NOT IN ('a', 'b.c')`);
    expect(eventTypeFilter({ except: [] })).toBe('');
  });
});
