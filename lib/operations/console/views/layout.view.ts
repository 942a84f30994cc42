import { html, type Html } from '../console-html';

/** What every page needs to know about where and how it is served. */
export interface ViewContext {
  /** The console's mount path, e.g. `/outbox`. */
  readonly base: string;
  readonly readOnly: boolean;
  /** The token the page's forms carry (see ConsoleCsrf). */
  readonly csrf: string;
  /** How often the page reloads, for the pages that may (GET); null for the others. */
  readonly refresh: PageRefresh | null;
}

/** A GET page's reload interval, and where its Refresh control sends the visitor's choice. */
export interface PageRefresh {
  /** 0: never. */
  readonly seconds: number;
  /** The page's path, e.g. `/outbox/messages`. */
  readonly path: string;
  /** Its query parameters other than `refresh`. */
  readonly params: readonly [string, string][];
}

const REFRESH_CHOICES: readonly number[] = [0, 5, 15, 60];

/**
 * The Refresh control: a GET form to this page with its other parameters, which console.js
 * shows and submits on change. Hidden without the script, which is what reloads the page.
 */
function refreshControl(refresh: PageRefresh | null): Html | string {
  if (refresh === null) return '';
  const choices = REFRESH_CHOICES.includes(refresh.seconds)
    ? REFRESH_CHOICES
    : [...REFRESH_CHOICES, refresh.seconds].sort((a, b) => a - b);
  return html`<form method="get" action="${refresh.path}" id="refresh-form" class="refresh" hidden>
    ${refresh.params.map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}" />`)}
    <label
      >Refresh
      <select name="refresh" id="refresh">
        ${choices.map(
          (s) =>
            html`<option value="${s}" ${s === refresh.seconds ? html`selected` : ''}>
              ${s === 0 ? 'off' : `every ${s} s`}
            </option>`,
        )}
      </select></label
    >
    <span id="refresh-state" class="muted" aria-live="polite"></span>
  </form>`;
}

const NAV: readonly [string, string][] = [
  ['', 'Backlog'],
  ['/messages?status=dead', 'Dead letters'],
  ['/blocked-keys', 'Blocked keys'],
  ['/stuck-leases', 'Stuck leases'],
  ['/delivery-partitions', 'Delivery partitions'],
  ['/why', 'Explain a message'],
  ['/redrive', 'Re-drive'],
  ['/erase', 'Erase'],
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
      <body data-refresh="${ctx.refresh?.seconds ?? 0}">
        <header>
          <strong>Outbox console</strong
          >${ctx.readOnly ? html` <span class="badge">read-only</span>` : ''}
          <nav>${NAV.map(([href, label]) => html`<a href="${ctx.base}${href}">${label}</a>`)}</nav>
          ${refreshControl(ctx.refresh)}
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
