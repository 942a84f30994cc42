import { sql, type SQL, type SQLChunk } from 'drizzle-orm';
import { placeholders, type PlaceholderStyle } from '../../drivers/sql-placeholders';

/**
 * The outbox's finished statement as Drizzle's `sql` object: the text between placeholders as
 * `sql.raw` chunks and every value as `sql.param`, so Drizzle binds them and nothing is spliced
 * into the text.
 *
 * Drizzle numbers the parameters itself, `$1`, `$2`, … in the order they appear. The outbox's
 * PostgreSQL statements use a number more than once (`$1` is the lock token of every settle
 * branch): its first appearance becomes the parameter and the later ones refer to the number
 * Drizzle gives it, so each value is bound once and keeps one type in the statement.
 */
export function drizzleStatement(
  text: string,
  params: readonly unknown[] | undefined,
  style: PlaceholderStyle,
): SQL {
  const values = params ?? [];
  const chunks: SQLChunk[] = [];
  const numberOf = new Map<number, number>();
  let bound = 0;
  let start = 0;
  for (const placeholder of placeholders(text, style)) {
    chunks.push(sql.raw(text.slice(start, placeholder.at)));
    start = placeholder.at + placeholder.length;
    const index = placeholder.index ?? bound;
    if (index >= values.length) {
      throw new RangeError(
        `The statement refers to parameter ${index + 1} but ${values.length} were given`,
      );
    }
    const known = numberOf.get(index);
    if (known !== undefined) {
      chunks.push(sql.raw(`$${known}`));
      continue;
    }
    bound += 1;
    numberOf.set(index, bound);
    chunks.push(sql.param(values[index]));
  }
  chunks.push(sql.raw(text.slice(start)));
  return sql.join(chunks);
}
