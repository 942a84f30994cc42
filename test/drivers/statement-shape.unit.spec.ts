import { statementShape } from '../../lib/drivers/statement-shape';

// Prisma answers rows or a count, not both, and libSQL counts no changed rows for a statement
// that answers rows: the shape of the outbox's statement decides which call the Prisma port
// makes and what the libSQL port counts, so a write's count and a RETURNING's rows both reach
// the store.

describe('statementShape', () => {
  it.each([
    ['SELECT 1', 'read'],
    ['  (SELECT 1)', 'read'],
    ['WITH a AS (UPDATE t SET x = 1 RETURNING id) SELECT count(*) FROM a', 'read'],
    ['UPDATE t SET x = 1 WHERE id = $1', 'count'],
    ['UPDATE t SET x = 1 WHERE id = $1 RETURNING id', 'returning'],
    ["INSERT INTO t (a) VALUES ('returning') ON CONFLICT DO NOTHING", 'count'],
    ['INSERT INTO t (a) SELECT $1 ON CONFLICT (a) DO NOTHING RETURNING a', 'returning'],
    ['WITH b AS MATERIALIZED (SELECT 1) UPDATE t SET s = 1 FROM b', 'count'],
    ['WITH d AS (DELETE FROM t RETURNING id) INSERT INTO t (id) SELECT id FROM d', 'count'],
    ['DELETE FROM t WHERE id IN (SELECT id FROM t LIMIT 1) RETURNING message_key', 'returning'],
    ['-- SELECT\nUPDATE t SET a = 1 /* RETURNING */', 'count'],
    ['CREATE INDEX IF NOT EXISTS i ON t (a) WHERE status = $$pending$$', 'count'],
    // MySQL's quoted names, and SQLite's ? placeholders.
    ['UPDATE `returning` SET a = ? WHERE id = ?', 'count'],
    ['SELECT `select`.a FROM `update` AS `select`', 'read'],
    ['INSERT INTO t (a) VALUES (?) ON CONFLICT (a) DO NOTHING RETURNING a AS id', 'returning'],
  ] as const)('%s → %s', (sql, shape) => {
    expect(statementShape(sql)).toBe(shape);
  });
});
