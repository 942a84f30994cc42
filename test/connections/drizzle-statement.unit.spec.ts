import { MySqlDialect } from 'drizzle-orm/mysql-core';
import { PgDialect } from 'drizzle-orm/pg-core';
import { drizzleStatement } from '../../lib/connections/drizzle';

// The outbox's placeholder SQL as Drizzle's sql object, compiled by Drizzle's own dialects: the
// text Drizzle sends and the values it binds.

const pg = (text: string, params: unknown[]) =>
  new PgDialect().sqlToQuery(drizzleStatement(text, params, 'numbered'));
const mysql = (text: string, params: unknown[]) =>
  new MySqlDialect().sqlToQuery(drizzleStatement(text, params, 'question'));

describe('drizzleStatement', () => {
  it('binds every value as a parameter, none in the text', () => {
    const query = pg('UPDATE t SET a = $1, b = $2 WHERE id = ANY($3::int8[])', [
      "x'); DROP TABLE t; --",
      null,
      [1, 2],
    ]);
    expect(query.sql).toBe('UPDATE t SET a = $1, b = $2 WHERE id = ANY($3::int8[])');
    expect(query.params).toEqual(["x'); DROP TABLE t; --", null, [1, 2]]);
  });

  it('binds a number used twice once, and renumbers placeholders in order of appearance', () => {
    const query = pg('SELECT $2::text AS b, $1::uuid AS a WHERE $1::uuid IS NOT NULL', ['u', 'b']);
    expect(query.sql).toBe('SELECT $1::text AS b, $2::uuid AS a WHERE $2::uuid IS NOT NULL');
    expect(query.params).toEqual(['b', 'u']);
  });

  it('leaves placeholders inside literals, quoted names, dollar quotes and comments alone', () => {
    const text = `SELECT '$1 and ?', "col$1", $$ $2 $$, $tag$ $1 $tag$ -- $1\n, $1 /* $2 */`;
    const query = pg(text, ['v']);
    expect(query.sql).toBe(text);
    expect(query.params).toEqual(['v']);

    const my = mysql("SELECT 'it''s ?', `a?`, 'x\\'?' , ? -- ?\n", [7]);
    expect(my.sql).toBe("SELECT 'it''s ?', `a?`, 'x\\'?' , ? -- ?\n");
    expect(my.params).toEqual([7]);
  });

  it('binds question marks in order', () => {
    const query = mysql('INSERT INTO t (a, b) VALUES (?, ?)', ['a', 2]);
    expect(query.sql).toBe('INSERT INTO t (a, b) VALUES (?, ?)');
    expect(query.params).toEqual(['a', 2]);
  });

  it('refuses a placeholder with no value', () => {
    expect(() => drizzleStatement('SELECT $2', ['only one'], 'numbered')).toThrow(RangeError);
    expect(() => drizzleStatement('SELECT ?, ?', [1], 'question')).toThrow(RangeError);
  });
});
