import { html, type Html } from '../console-html';
import type { OutboxDispatcherStatus } from '../../../dispatch/outbox.dispatcher';
import type { OutboxDelivery } from '../../../options/outbox.options';
import type { BacklogSample } from '../backlog-sampler';
import { duration, layout, query, time, type ViewContext } from './layout.view';
import type { OutboxPolicyView } from '../../../module/admin/outbox-admin.interfaces';
import { policySummary } from './message.view';

const WIDTH = 640;
const HEIGHT = 190;
/** Room for the count labels (left) and the time labels and axis title (bottom). */
const PLOT = { left: 52, right: 12, top: 10, bottom: 40 } as const;

interface Series {
  readonly name: string;
  /** The CSS class of its line and key: its colour and, beyond the first, its dash pattern. */
  readonly css: string;
  readonly value: (s: BacklogSample) => number;
}

/** The smallest 1, 2 or 5 times a power of ten at or above `n`: round tick values. */
function niceCeiling(n: number): number {
  const power = 10 ** Math.floor(Math.log10(Math.max(1, n)));
  return [1, 2, 5, 10].map((m) => m * power).find((v) => v >= n) ?? n;
}

/** A time tick: to the second over a short span, to the minute over a longer one. */
function clock(at: number, span: number): string {
  const iso = new Date(at).toISOString();
  return span < 10 * 60_000 ? iso.slice(11, 19) : iso.slice(11, 16);
}

/** A legend swatch: a short piece of the series' line, dashes and all. */
function swatch(css: string): Html {
  return html`<svg class="swatch" viewBox="0 0 28 10" width="28" height="10" aria-hidden="true">
    <line class="${css}" x1="0" y1="5" x2="28" y2="5" />
  </svg>`;
}

/**
 * The last hour of some series as lines on a time axis (UTC) and a count axis, drawn on the
 * server. Every series but the first is dashed, and drawn over the ones before it, so a line
 * lying on another still shows.
 */
function chart(
  history: readonly BacklogSample[],
  label: string,
  unit: string,
  series: readonly Series[],
): Html {
  if (history.length < 2) {
    return html`<p class="muted">
      The chart of the last hour fills in as the console samples the backlog.
    </p>`;
  }
  const first = history[0]?.at.getTime() ?? 0;
  const last = history[history.length - 1]?.at.getTime() ?? 0;
  const span = Math.max(1, last - first);
  const peak = Math.max(0, ...history.flatMap((s) => series.map((line) => line.value(s))));
  const top = niceCeiling(peak);
  const width = WIDTH - PLOT.left - PLOT.right;
  const height = HEIGHT - PLOT.top - PLOT.bottom;
  const xOf = (at: number): number => PLOT.left + ((at - first) / span) * width;
  const yOf = (value: number): number => PLOT.top + height - (value / top) * height;
  const points = (value: (s: BacklogSample) => number): string =>
    history.map((s) => `${xOf(s.at.getTime()).toFixed(1)},${yOf(value(s)).toFixed(1)}`).join(' ');
  const step = top / ([4, 5, 2, 1].find((parts) => Number.isInteger(top / parts)) ?? 1);
  const counts = Array.from({ length: Math.round(top / step) + 1 }, (_, i) => i * step);
  // No more time ticks than the span has distinct labels (seconds, or minutes past 10 min).
  const intervals = Math.max(
    1,
    Math.min(4, Math.floor(span / (span < 10 * 60_000 ? 1_000 : 60_000))),
  );
  const times = Array.from({ length: intervals + 1 }, (_, i) => first + (span * i) / intervals);
  const bottom = PLOT.top + height;
  return html`<figure>
    <svg
      class="chart"
      viewBox="0 0 ${WIDTH} ${HEIGHT}"
      width="${WIDTH}"
      height="${HEIGHT}"
      role="img"
      aria-label="${label}"
    >
      <g class="axis y">
        ${counts.map(
          (v) =>
            html`<line
                class="grid"
                x1="${PLOT.left}"
                y1="${yOf(v)}"
                x2="${WIDTH - PLOT.right}"
                y2="${yOf(v)}"
              />
              <text x="${PLOT.left - 6}" y="${yOf(v) + 4}" text-anchor="end">${v}</text>`,
        )}
        <text
          class="axis-title"
          transform="translate(12 ${PLOT.top + height / 2}) rotate(-90)"
          text-anchor="middle"
        >
          ${unit}
        </text>
      </g>
      <g class="axis x">
        <line x1="${PLOT.left}" y1="${bottom}" x2="${WIDTH - PLOT.right}" y2="${bottom}" />
        ${times.map(
          (t, i) =>
            html`<line x1="${xOf(t)}" y1="${bottom}" x2="${xOf(t)}" y2="${bottom + 4}" />
              <text
                x="${xOf(t)}"
                y="${bottom + 16}"
                text-anchor="${i === 0 ? 'start' : i === times.length - 1 ? 'end' : 'middle'}"
                >${clock(t, span)}</text
              >`,
        )}
        <text
          class="axis-title"
          x="${PLOT.left + width / 2}"
          y="${HEIGHT - 4}"
          text-anchor="middle"
        >
          time (UTC)
        </text>
      </g>
      ${series.map((line) => html`<polyline class="${line.css}" points="${points(line.value)}" />`)}
    </svg>
    <figcaption class="legend">
      ${series.map((line) => html`<span class="key ${line.css}">${swatch(line.css)} ${line.name}</span> `)}
      · ${time(history[0]?.at ?? null)} to ${time(history[history.length - 1]?.at ?? null)} · peak
      ${peak}
    </figcaption>
  </figure>`;
}

const SPARK_WIDTH = 120;
const SPARK_HEIGHT = 24;

/** One topic's delivered and dead-lettered per minute over the samples, as a small chart. */
function sparkline(history: readonly BacklogSample[], topic: string): Html {
  if (history.length < 2) return html``;
  const first = history[0]?.at.getTime() ?? 0;
  const span = Math.max(1, (history[history.length - 1]?.at.getTime() ?? 0) - first);
  const of = (s: BacklogSample): { delivered: number; dead: number } => {
    const t = s.byTopic.find((entry) => entry.topic === topic);
    return { delivered: t?.deliveredLastMinute ?? 0, dead: t?.deadLastMinute ?? 0 };
  };
  const top = Math.max(1, ...history.map((s) => Math.max(of(s).delivered, of(s).dead)));
  const points = (value: (s: BacklogSample) => number): string =>
    history
      .map((s) => {
        const x = ((s.at.getTime() - first) / span) * SPARK_WIDTH;
        const y = SPARK_HEIGHT - (value(s) / top) * (SPARK_HEIGHT - 2) - 1;
        return `${x.toFixed(1)},${y.toFixed(1)}`;
      })
      .join(' ');
  return html`<svg
    class="spark"
    viewBox="0 0 ${SPARK_WIDTH} ${SPARK_HEIGHT}"
    width="${SPARK_WIDTH}"
    height="${SPARK_HEIGHT}"
    role="img"
    aria-label="${topic}: delivered and dead-lettered per minute over the sampled period, peak ${top}"
  >
    <polyline class="delivered" points="${points((s) => of(s).delivered)}" />
    <polyline class="dead dashed" points="${points((s) => of(s).dead)}" />
  </svg>`;
}

const BACKLOG: readonly Series[] = [
  { name: 'undelivered', css: 'undelivered', value: (s) => s.pending + s.waiting + s.leased },
  { name: 'dead', css: 'dead dashed', value: (s) => s.dead },
];
const THROUGHPUT: readonly Series[] = [
  { name: 'delivered per minute', css: 'delivered', value: (s) => s.deliveredLastMinute },
  { name: 'dead-lettered per minute', css: 'dead dashed', value: (s) => s.deadLastMinute },
];

function dispatcherSection(status: OutboxDispatcherStatus | null): Html {
  if (status === null) {
    return html`<p class="muted" id="dispatcher">
      This instance runs no dispatcher (workers: false).
    </p>`;
  }
  const state = !status.started
    ? 'stopped'
    : status.stalledDatabaseCall !== null
      ? `waiting on a database call that does not answer (${status.stalledDatabaseCall})`
      : status.pausedUntil !== null
        ? `paused after an outage until ${time(status.pausedUntil)}`
        : status.runningForMs !== null
          ? `publishing for ${duration(status.runningForMs)}`
          : 'idle';
  return html`<p id="dispatcher">
    This instance's dispatcher: <strong>${state}</strong>; last run finished
    ${time(status.lastRunFinishedAt)}. (Other instances report on their own console.)
  </p>`;
}

// With delivery 'external' the table never records a delivery: "pending" only means written, and
// the gauges would call every message stuck.
function externalDeliverySection(): Html {
  return html`<p id="external-delivery">
    <strong>Delivery is external (Debezium).</strong> This app writes the messages and Debezium's
    connector publishes them from the database log, so the table does not record what reached Kafka:
    the pending count is what was written in the cleaner's retention, not a backlog. Watch the
    connector's lag and the replication slot instead (docs/debezium.md#monitoring).
  </p>`;
}

export function overviewPage(
  ctx: ViewContext,
  now: BacklogSample,
  history: readonly BacklogSample[],
  dispatcher: OutboxDispatcherStatus | null,
  delivery: OutboxDelivery = 'dispatcher',
  policies: readonly OutboxPolicyView[] = [],
): Html {
  const rows = now.byTopic.filter(
    (t) => t.pending + t.waiting + t.leased + t.dead + t.deliveredLastMinute + t.deadLastMinute > 0,
  );
  return layout(
    ctx,
    'Backlog',
    html`<p class="muted">
        Sampled at ${time(now.at)} (the console counts the backlog every few seconds; pages read the
        last sample).
      </p>
      <dl class="tiles">
        <div>
          <dt>Pending</dt>
          <dd id="total-pending">${now.pending}</dd>
        </div>
        <div>
          <dt>Waiting</dt>
          <dd id="total-waiting">${now.waiting}</dd>
        </div>
        <div>
          <dt>Leased</dt>
          <dd id="total-leased">${now.leased}</dd>
        </div>
        <div>
          <dt>Dead</dt>
          <dd id="total-dead">${now.dead}</dd>
        </div>
        <div>
          <dt>Oldest pending</dt>
          <dd>${duration(now.oldestPendingAgeMs)}</dd>
        </div>
        <div>
          <dt>Delivered / min</dt>
          <dd id="delivered-per-minute">${now.deliveredLastMinute}</dd>
        </div>
        <div>
          <dt>Dead-lettered / min</dt>
          <dd id="dead-per-minute">${now.deadLastMinute}</dd>
        </div>
      </dl>
      ${delivery === 'external' ? externalDeliverySection() : dispatcherSection(dispatcher)}
      <h2>Last hour</h2>
      ${chart(history, 'Backlog over the sampled period', 'messages', BACKLOG)}
      ${chart(history, 'Throughput over the sampled period', 'per minute', THROUGHPUT)}
      <p class="muted">
        Throughput: messages delivered and dead-lettered in the minute before each sample, read from
        delivered_at and dead_at (delivered rows the cleaner already removed are not counted).
      </p>
      <h2>By topic</h2>
      ${
        rows.length === 0
          ? html`<p>
              Nothing is waiting for delivery, nothing was delivered in the last minute and there
              are no dead letters.
            </p>`
          : html`<table id="topics">
              <thead>
                <tr>
                  <th>Topic</th>
                  <th>Pending</th>
                  <th>Waiting</th>
                  <th>Leased</th>
                  <th>Dead</th>
                  <th>Oldest pending</th>
                  <th>Delivered / min</th>
                  <th>Dead-lettered / min</th>
                  <th>Last hour</th>
                </tr>
              </thead>
              <tbody>
                ${rows.map(
                  (t) =>
                    html`<tr>
                      <td>${t.topic}</td>
                      <td>${t.pending}</td>
                      <td>${t.waiting}</td>
                      <td>${t.leased}</td>
                      <td>
                        ${
                          t.dead === 0
                            ? '0'
                            : html`<a
                                href="${ctx.base}/messages${query([
                                  ['status', 'dead'],
                                  ['topic', t.topic],
                                ])}"
                                >${t.dead}</a
                              >`
                        }
                      </td>
                      <td>${duration(t.oldestPendingAgeMs)}</td>
                      <td>${t.deliveredLastMinute}</td>
                      <td>${t.deadLastMinute}</td>
                      <td>${sparkline(history, t.topic)}</td>
                    </tr>`,
                )}
              </tbody>
            </table>`
      }
      ${policiesSection(policies)}`,
  );
}

/** The policies the dispatcher delivers under: the module's defaults and each event type's. */
function policiesSection(policies: readonly OutboxPolicyView[]): Html {
  if (policies.length === 0) return html``;
  return html`<h2>Policies</h2>
    <table id="policies">
      <thead>
        <tr>
          <th>Event type</th>
          <th>Policy</th>
        </tr>
      </thead>
      <tbody>
        ${policies.map(
          (p) =>
            html`<tr>
              <td>
                ${p.name === 'default' ? html`<span class="muted">every other type</span>` : p.name}
              </td>
              <td>${policySummary(p)}</td>
            </tr>`,
        )}
      </tbody>
    </table>`;
}
