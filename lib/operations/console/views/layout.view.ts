import { html, type Html } from '../console-html';

/** What every page needs to know about where and how it is served. */
export interface ViewContext {
  /** The console's mount path, e.g. `/outbox`. */
  readonly base: string;
  readonly readOnly: boolean;
  /** The token the page's forms carry (see ConsoleCsrf). */
  readonly csrf: string;
}

const NAV: readonly [string, string][] = [
  ['', 'Backlog'],
  ['/messages?status=dead', 'Dead letters'],
  ['/blocked-keys', 'Blocked keys'],
  ['/stuck-leases', 'Stuck leases'],
  ['/why', 'Explain a message'],
  ['/audit', 'Audit log'],
];

export function layout(ctx: ViewContext, title: string, body: Html): Html {
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <meta name="referrer" content="same-origin" />
        <title>${title} · Outbox console</title>
        <link rel="stylesheet" href="${ctx.base}/assets/console.css" />
        <script src="${ctx.base}/assets/console.js" defer></script>
      </head>
      <body>
        <header>
          <strong>Outbox console</strong
          >${ctx.readOnly ? html` <span class="badge">read-only</span>` : ''}
          <nav>${NAV.map(([href, label]) => html`<a href="${ctx.base}${href}">${label}</a>`)}</nav>
        </header>
        <main>
          <h1>${title}</h1>
          ${body}
        </main>
      </body>
    </html>`;
}

/** A page with only a message: errors, refusals, results. */
export function notice(
  ctx: ViewContext,
  title: string,
  text: string,
  extra: Html | string = '',
): Html {
  return layout(
    ctx,
    title,
    html`<p class="notice" role="alert">${text}</p>
      ${extra}`,
  );
}

export function query(pairs: readonly [string, string][]): string {
  return pairs.length === 0
    ? ''
    : `?${new URLSearchParams(pairs as [string, string][]).toString()}`;
}

/** Milliseconds as the largest two units: `3 h 12 min`, `41 s`. */
export function duration(ms: number | null): string {
  if (ms === null) return '–';
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

export function time(date: Date | null): string {
  return date === null ? '–' : date.toISOString().replace('T', ' ').replace('Z', ' UTC');
}

export function csrfField(ctx: ViewContext): Html {
  return html`<input type="hidden" name="csrf" value="${ctx.csrf}" />`;
}
