/**
 * What a statement (PostgreSQL, MySQL or SQLite) answers: `read` rows (a SELECT, or a WITH whose
 * main statement is one), `returning` rows that are also the changed rows (INSERT, UPDATE or
 * DELETE … RETURNING at the top level), or only a `count` (a write without RETURNING, DDL,
 * anything else).
 */
export type StatementShape = 'read' | 'returning' | 'count';

/** The shape of `sql`, from its words outside literals, comments and parentheses. */
export function statementShape(sql: string): StatementShape {
  const words = topLevelWords(sql);
  // A statement wholly in parentheses is a query: `(SELECT …) UNION (SELECT …)`.
  if (words.length === 0) return /^\s*\(/.test(sql) ? 'read' : 'count';
  let i = 0;
  if (words[0] === 'with') {
    // CTE names and AS, then the main statement: its first keyword at depth 0 after them.
    i = words.findIndex((w, at) => at > 0 && MAIN.has(w));
    if (i === -1) return 'count';
  }
  const main = words[i];
  if (main === 'select' || main === 'values' || main === 'table') return 'read';
  if (main === 'insert' || main === 'update' || main === 'delete' || main === 'merge') {
    return words.includes('returning', i) ? 'returning' : 'count';
  }
  return 'count';
}

const MAIN: ReadonlySet<string> = new Set(['select', 'insert', 'update', 'delete', 'merge']);

/** The lower-cased words of `sql` at parenthesis depth 0, outside literals and comments. */
function topLevelWords(sql: string): string[] {
  const words: string[] = [];
  let depth = 0;
  let i = 0;
  while (i < sql.length) {
    const c = sql[i] ?? '';
    const next = sql[i + 1];
    // MySQL quotes names with backticks.
    if (c === "'" || c === '"' || c === '`') {
      const end = closing(sql, i, c);
      i = end;
    } else if (c === '-' && next === '-') {
      const end = sql.indexOf('\n', i);
      i = end === -1 ? sql.length : end + 1;
    } else if (c === '/' && next === '*') {
      const end = sql.indexOf('*/', i + 2);
      i = end === -1 ? sql.length : end + 2;
    } else if (c === '$') {
      const tag = /^\$[A-Za-z_]*\$/.exec(sql.slice(i));
      if (tag === null) {
        i += 1;
      } else {
        const end = sql.indexOf(tag[0], i + tag[0].length);
        i = end === -1 ? sql.length : end + tag[0].length;
      }
    } else if (c === '(') {
      depth += 1;
      i += 1;
    } else if (c === ')') {
      depth -= 1;
      i += 1;
    } else if (/[A-Za-z_]/.test(c)) {
      const word = /^[A-Za-z_][A-Za-z0-9_]*/.exec(sql.slice(i))?.[0] ?? c;
      if (depth === 0) words.push(word.toLowerCase());
      i += word.length;
    } else {
      i += 1;
    }
  }
  return words;
}

function closing(sql: string, start: number, quote: string): number {
  let i = start + 1;
  while (i < sql.length) {
    if (sql[i] === quote) {
      if (sql[i + 1] !== quote) return i + 1;
      i += 2;
    } else {
      i += 1;
    }
  }
  return sql.length;
}
