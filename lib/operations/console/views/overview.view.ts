import { html, type Html } from '../console-html';
import type { OutboxDispatcherStatus } from '../../../dispatch/outbox.dispatcher';
import type { BacklogSample } from '../backlog-sampler';
import { duration, layout, query, time, type ViewContext } from './layout.view';

const WIDTH = 600;
const HEIGHT = 120;

/** The last hour as two polylines (undelivered: pending + waiting + leased; dead), drawn on the server. */
function chart(history: readonly BacklogSample[]): Html {
  if (history.length < 2) {
    return html`<p class="muted">
      The chart of the last hour fills in as the console samples the backlog.
    </p>`;
  }
  const first = history[0]?.at.getTime() ?? 0;
  const span = Math.max(1, (history[history.length - 1]?.at.getTime() ?? 0) - first);
  const top = Math.max(
    1,
    ...history.map((s) => Math.max(s.pending + s.waiting + s.leased, s.dead)),
  );
  const line = (value: (s: BacklogSample) => number): string =>
    history
      .map((s) => {
        const x = ((s.at.getTime() - first) / span) * WIDTH;
        const y = HEIGHT - (value(s) / top) * (HEIGHT - 4) - 2;
        return `${x.toFixed(1)},${y.toFixed(1)}`;
      })
      .join(' ');
  return html`<figure>
    <svg
      viewBox="0 0 ${WIDTH} ${HEIGHT}"
      width="${WIDTH}"
      height="${HEIGHT}"
      role="img"
      aria-label="Backlog over the sampled period"
    >
      <polyline class="undelivered" points="${line((s) => s.pending + s.waiting + s.leased)}" />
      <polyline class="dead" points="${line((s) => s.dead)}" />
    </svg>
    <figcaption>
      <span class="key undelivered">undelivered</span> <span class="key dead">dead</span> ·
      ${time(history[0]?.at ?? null)} to ${time(history[history.length - 1]?.at ?? null)} · peak
      ${top}
    </figcaption>
  </figure>`;
}

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

export function overviewPage(
  ctx: ViewContext,
  now: BacklogSample,
  history: readonly BacklogSample[],
  dispatcher: OutboxDispatcherStatus | null,
): Html {
  const rows = now.byTopic.filter((t) => t.pending + t.waiting + t.leased + t.dead > 0);
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
      </dl>
      ${dispatcherSection(dispatcher)}
      <h2>Last hour</h2>
      ${chart(history)}
      <h2>By topic</h2>
      ${
        rows.length === 0
          ? html`<p>Nothing is waiting for delivery and there are no dead letters.</p>`
          : html`<table id="topics">
              <thead>
                <tr>
                  <th>Topic</th>
                  <th>Pending</th>
                  <th>Waiting</th>
                  <th>Leased</th>
                  <th>Dead</th>
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
                    </tr>`,
                )}
              </tbody>
            </table>`
      }`,
  );
}
