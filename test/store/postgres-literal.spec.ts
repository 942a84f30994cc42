import { Pool } from 'pg';
import { postgresLiterals } from '../../lib/store/postgres/postgres-literal';
import { serverConnection } from '../support/databases';
import { describeWith } from '../support/services';

// The store writes a claim's and a settle's values into the text of `EXECUTE name(…)`, sent in
// one simple query (one round trip). Message keys and error texts are the application's, so
// each value must reach the statement exactly as it would bound as a parameter, whatever it
// holds, and never be read as SQL. Asserted against the server: values bound to a named
// statement, then the same values written in, must come back equal.

const NASTY = [
  '',
  "'",
  "''",
  "\\'",
  '\\',
  '\\\\',
  '"',
  '\\"',
  "a'); DROP TABLE x; --",
  "E'",
  '$$',
  '$tag$',
  '{',
  '}',
  '{}',
  '{"a",b}',
  ',',
  'NULL',
  'null',
  ' leading and trailing ',
  'line\nbreak\r\ttab',
  'ünïcödé ✓ 漢字',
  '😀 outside the BMP',
  '\\x41',
  '\\u0041',
  '/* comment */',
  ';',
];

/** Strings of characters a literal must get right, in random order. */
function randomStrings(count: number, seed: number): string[] {
  const alphabet = ["'", '\\', '"', '{', '}', ',', ' ', '$', ';', 'E', 'a', 'Ω', '😀', '\n', '-'];
  let state = seed;
  const next = (): number => {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
    return state;
  };
  return Array.from({ length: count }, () =>
    Array.from({ length: next() % 12 }, () => alphabet[next() % alphabet.length]).join(''),
  );
}

describeWith(['postgres'], 'PostgreSQL values written into a statement as constants', () => {
  const c = serverConnection('postgres');
  // One connection: the named statement prepared by binding is the one EXECUTE runs.
  const pool = new Pool({
    host: c.host,
    port: c.port,
    user: c.username,
    password: c.password,
    database: c.database,
    max: 1,
  });
  const name = 'nestjs_outbox_literal_test';
  const text =
    'SELECT $1::text AS s, $2::text[] AS a, $3::int8[] AS i, $4::timestamptz AS d, $5::int AS n';

  afterAll(() => pool.end());

  async function bound(values: unknown[]): Promise<unknown> {
    const { rows } = await pool.query({ name, text, values });
    return rows[0];
  }

  async function written(values: unknown[], conforming: 'on' | 'off'): Promise<unknown> {
    const literals = postgresLiterals(values);
    if (literals === undefined) throw new Error('not writable');
    // As the store sends it: settings, then the EXECUTE, in one simple query.
    const results = (await pool.query(
      `SET standard_conforming_strings = ${conforming}; EXECUTE ${name}(${literals.join(', ')})`,
    )) as unknown as { rows: unknown[] }[];
    return results[1]?.rows[0];
  }

  afterEach(async () => {
    await pool.query('SET standard_conforming_strings = on');
  });

  it.each(['on', 'off'] as const)(
    'reads back every value as bound, with standard_conforming_strings %s',
    async (conforming) => {
      const strings = [...NASTY, ...randomStrings(200, conforming === 'on' ? 7 : 11)];
      const at = new Date('2026-11-25T10:37:19.123Z');
      for (const s of strings) {
        const values = [s, [s, 'x', null, s], ['1', '9007199254740993'], at, 42];
        const expected = await bound(values);
        expect(await written(values, conforming)).toEqual(expected);
        expect(expected).toEqual({
          s,
          a: [s, 'x', null, s],
          i: ['1', '9007199254740993'],
          d: at,
          n: 42,
        });
      }
      expect(await written([null, null, null, null, null], conforming)).toEqual(
        await bound([null, null, null, null, null]),
      );
    },
  );

  it('leaves to binding what it cannot write: a NUL character, objects, buffers, non-finite numbers', () => {
    expect(postgresLiterals(['a\0b'])).toBeUndefined();
    expect(postgresLiterals([['ok', 'a\0b']])).toBeUndefined();
    expect(postgresLiterals([{ a: 1 }])).toBeUndefined();
    expect(postgresLiterals([Buffer.from('x')])).toBeUndefined();
    expect(postgresLiterals([Number.NaN])).toBeUndefined();
    expect(postgresLiterals([[Number.POSITIVE_INFINITY]])).toBeUndefined();
    expect(postgresLiterals([new Date(Number.NaN)])).toBeUndefined();
    expect(postgresLiterals([[['nested']]])).toBeUndefined();
    expect(postgresLiterals(['plain', 3, null, ['a', null]])).toEqual([
      "E'plain'",
      "E'3'",
      'NULL',
      `E'{"a",NULL}'`,
    ]);
  });
});
