/** How the outbox's SQL marks its parameters: `$1` on PostgreSQL, `?` on MySQL/MariaDB/SQLite. */
export type PlaceholderStyle = 'numbered' | 'question';

export interface Placeholder {
  /** Where it starts in the text. */
  readonly at: number;
  readonly length: number;
  /** The zero-based parameter a numbered placeholder names; undefined for `?` (the next one). */
  readonly index?: number;
}

/**
 * The placeholders of `text`, outside string literals, quoted identifiers, dollar-quoted bodies
 * and comments (a `?` or `$1` there is text, not a parameter).
 */
export function* placeholders(text: string, style: PlaceholderStyle): Generator<Placeholder> {
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    const next = text[i + 1];
    if (c === "'" || c === '"' || c === '`') {
      i = quotedEnd(text, i, c, style === 'question');
    } else if (c === '-' && next === '-') {
      const end = text.indexOf('\n', i);
      i = end === -1 ? text.length : end + 1;
    } else if (c === '/' && next === '*') {
      const end = text.indexOf('*/', i + 2);
      i = end === -1 ? text.length : end + 2;
    } else if (c === '$' && style === 'numbered') {
      const number = /^\$(\d+)/.exec(text.slice(i));
      if (number !== null) {
        const digits = number[1] ?? '';
        yield { at: i, length: digits.length + 1, index: Number(digits) - 1 };
        i += digits.length + 1;
        continue;
      }
      const tag = /^\$[A-Za-z_]*\$/.exec(text.slice(i));
      if (tag === null) {
        i += 1;
        continue;
      }
      const end = text.indexOf(tag[0], i + tag[0].length);
      i = end === -1 ? text.length : end + tag[0].length;
    } else if (c === '?' && style === 'question') {
      yield { at: i, length: 1 };
      i += 1;
    } else {
      i += 1;
    }
  }
}

/** The index after the quote closing the one at `start`; doubled quotes (and MySQL's `\`) escape. */
function quotedEnd(text: string, start: number, quote: string, backslash: boolean): number {
  let i = start + 1;
  while (i < text.length) {
    const c = text[i];
    if (backslash && quote !== '`' && c === '\\') {
      i += 2;
    } else if (c === quote) {
      if (text[i + 1] !== quote) return i + 1;
      i += 2;
    } else {
      i += 1;
    }
  }
  return text.length;
}
