/**
 * Collects the values of one statement and hands out the dialect's placeholder for each, so a
 * statement is built from fixed fragments with every value bound, never spliced in.
 */
export class SqlParams {
  readonly values: unknown[] = [];

  constructor(private readonly style: 'numbered' | 'positional') {}

  /** Binds `value`; returns its placeholder (`$n` on PostgreSQL, `?` elsewhere). */
  add(value: unknown): string {
    this.values.push(value);
    // Positional placeholders bind in text order: fragments must be added in the order they
    // appear in the statement.
    return this.style === 'numbered' ? `$${this.values.length}` : '?';
  }
}
