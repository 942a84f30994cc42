/** A message's AMQP headers table; an absent value is left out of the table by amqplib. */
export type RabbitMqHeaderTable = Record<string, string | undefined>;

// More shapes than this (sets of header names) in one publisher's life get a table each time.
const MAX_SHAPES = 32;

/**
 * Headers tables reused from one publish to the next, one per set of header names.
 *
 * amqplib's `publish` makes `options.headers` the prototype of a fresh object and encodes the
 * table with `for … in`. V8 turns an object into a prototype by giving it a map of its own,
 * once per object: with a new headers object per message that was about 7 µs of node CPU per
 * publish with the four `x-outbox-*` headers, against about 0.3 µs when the same object comes
 * back (docs/performance.md, "What the headers cost in node"). Reuse is safe because amqplib
 * encodes the properties into the frame before `publish` returns, and a table is filled right
 * before each publish with a value for every name of its set, so nothing of one message can
 * reach the next.
 */
export class RabbitMqHeaderTables {
  private readonly tables = new Map<string, RabbitMqHeaderTable>();

  /** @param trailing the names every table may end with (the module's own headers). */
  constructor(private readonly trailing: readonly string[]) {}

  /**
   * The table for a message's own headers named `own` (in order), followed by the trailing
   * names when `withTrailing`: to be filled with a value for each of them before the publish it
   * is for, and not kept past it.
   */
  tableFor(own: readonly string[], withTrailing: boolean): RabbitMqHeaderTable {
    // `__proto__` cannot be an own property set by assignment: such a table is made each time.
    if (own.includes('__proto__')) return {};
    // The JSON of the names: one text per list, whatever characters the names hold.
    const shape = `${withTrailing ? '+' : '-'}${own.length === 0 ? '' : JSON.stringify(own)}`;
    let table = this.tables.get(shape);
    if (table === undefined) {
      table = {};
      // Every name in its order, so that the table's order is the same at every publish.
      for (const name of withTrailing ? [...own, ...this.trailing] : own) table[name] = undefined;
      if (this.tables.size < MAX_SHAPES) this.tables.set(shape, table);
    }
    return table;
  }
}
