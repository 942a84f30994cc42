/**
 * A statement's parameters written into its text, for `EXECUTE name(…)` of a named statement in
 * one simple query with its transaction's BEGIN and COMMIT (postgres.store.ts: one round trip
 * instead of three). Each value becomes a string constant of unknown type, which PostgreSQL
 * reads with the parameter's own input function, as it reads a parameter bound as text: the
 * values arrive as they would bound, and no value can be read as SQL.
 *
 * Strings are escape-string constants (`E'…'`, quotes and backslashes doubled), which mean the
 * same whatever `standard_conforming_strings` says; arrays use the array input syntax inside
 * one, every element quoted (backslashes and double quotes escaped), as node-postgres binds
 * them. A value this cannot write (an object, a Buffer, a string with a NUL character, which a
 * simple query cannot carry, a number that is not finite) gives undefined: the caller binds it.
 */
export function postgresLiterals(values: readonly unknown[]): string[] | undefined {
  const literals: string[] = [];
  for (const value of values) {
    if (value === null || value === undefined) {
      literals.push('NULL');
      continue;
    }
    const text = Array.isArray(value) ? arrayText(value) : scalarText(value);
    if (text === undefined || text.includes('\0')) return undefined;
    const escaped = CONSTANT_SPECIAL.test(text)
      ? text.replace(/\\/g, '\\\\').replace(/'/g, "''")
      : text;
    literals.push(`E'${escaped}'`);
  }
  return literals;
}

// What a string constant and an array element must escape. Ids and most keys hold neither: a
// test first spares them two replacements each (a settle writes 500 ids and 500 keys: about
// 110 → 70 µs per settle in a micro-benchmark; the library's largest self time in a CPU profile
// of a drain to Kafka).
const CONSTANT_SPECIAL = /['\\]/;
const ELEMENT_SPECIAL = /["\\]/;

function scalarText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : undefined;
  if (typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? undefined : value.toISOString();
  return undefined;
}

/** A one-dimensional array in PostgreSQL's array input syntax: `{"a","b\"c",NULL}`. */
function arrayText(values: readonly unknown[]): string | undefined {
  const elements: string[] = [];
  for (const value of values) {
    if (value === null || value === undefined) {
      elements.push('NULL');
      continue;
    }
    const text = scalarText(value);
    if (text === undefined) return undefined;
    elements.push(
      ELEMENT_SPECIAL.test(text)
        ? `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`
        : `"${text}"`,
    );
  }
  return `{${elements.join(',')}}`;
}
