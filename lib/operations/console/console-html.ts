/** Markup that is already escaped: only `html` and `raw` make one. */
export class Html {
  constructor(readonly value: string) {}

  toString(): string {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
  '`': '&#96;',
};

/** Text as HTML text or attribute value: every character that could end either is escaped. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"'`]/g, (c) => ESCAPES[c] ?? c);
}

function render(value: unknown): string {
  if (value instanceof Html) return value.value;
  if (Array.isArray(value)) return value.map(render).join('');
  if (value === null || value === undefined || value === false) return '';
  switch (typeof value) {
    case 'string':
      return escapeHtml(value);
    case 'number':
    case 'bigint':
    case 'boolean':
      return String(value);
    default:
      // Views pass text and numbers; anything else shows as its JSON, still escaped.
      return escapeHtml(JSON.stringify(value) ?? '');
  }
}

/**
 * The console's only way to build markup: every interpolated value is escaped unless it is
 * itself `Html`, so a payload, an error text or a key (all written by whoever enqueued the
 * message) can only ever show as text.
 */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0] ?? '';
  values.forEach((value, i) => {
    out += render(value) + (strings[i + 1] ?? '');
  });
  return new Html(out);
}

/** Markup written in this package's source (the stylesheet link, an SVG path), never data. */
export const raw = (markup: string): Html => new Html(markup);
