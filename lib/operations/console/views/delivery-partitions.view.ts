import { html, type Html } from '../console-html';
import type { OutboxDeliveryPartitions } from '../../../module/admin/outbox-admin.interfaces';
import { duration, layout, time, type ViewContext } from './layout.view';

/** How many of the latest moves the page lists (every partition's last move is below them). */
const LATEST_MOVES = 20;

const share = (fraction: number): string => `${Math.round(fraction * 1000) / 10} %`;

/** Milliseconds under a second as such, above as `duration` writes them. */
const ms = (value: number | null): string =>
  value === null ? '–' : value < 1_000 ? `${value} ms` : duration(value);

/**
 * The Delivery partitions page (`dispatcher.claims: 'partitions'`): the dispatcher processes
 * with their heartbeats, states and shares of the 256 partitions of the key space, the latest
 * moves and every partition's owner; or why they are not in use. Not the time partitions of a
 * partitioned table.
 */
export function deliveryPartitionsPage(ctx: ViewContext, view: OutboxDeliveryPartitions): Html {
  const intro = html`<p class="muted">
    With dispatcher.claims 'partitions' (PostgreSQL), the dispatchers share the key space in 256
    delivery partitions: each is delivered by the one process that holds it, which beats a heartbeat
    on the database clock. Not the time partitions of a partitioned table.
  </p>`;
  if (!view.inUse) {
    return layout(
      ctx,
      'Delivery partitions',
      html`${intro}
        <p id="not-in-use" data-reason="${view.reason}">${view.message}</p>`,
    );
  }
  const holders = view.dispatchers.filter((d) => d.partitions > 0).length;
  const latest = view.moves.latest.slice(0, LATEST_MOVES);
  return layout(
    ctx,
    'Delivery partitions',
    html`${intro}
      <dl class="tiles">
        <div>
          <dt>Partitions</dt>
          <dd id="partitions-total">${view.total}</dd>
        </div>
        <div>
          <dt>Held by</dt>
          <dd id="partitions-holders">${holders}</dd>
        </div>
        <div>
          <dt>Free</dt>
          <dd id="partitions-free">${view.unowned}</dd>
        </div>
        <div>
          <dt>Takes</dt>
          <dd id="partitions-moves">${view.moves.total}</dd>
        </div>
      </dl>
      <h2>Dispatchers</h2>
      <table id="partition-dispatchers">
        <thead>
          <tr>
            <th>Dispatcher</th>
            <th>Instance id</th>
            <th>State</th>
            <th>Last heartbeat</th>
            <th>Holds for</th>
            <th>Partitions</th>
            <th>Share</th>
            <th>Ranges</th>
            <th>Joined</th>
            <th>Last taken</th>
          </tr>
        </thead>
        <tbody>
          ${view.dispatchers.map(
            (d) =>
              html`<tr data-dispatcher="${d.id}" data-state="${d.state}">
                <td>${d.id}</td>
                <td>${d.instanceId ?? '–'}</td>
                <td>${d.state}</td>
                <td>${d.heartbeatAgeMs === null ? '–' : `${ms(d.heartbeatAgeMs)} ago`}</td>
                <td>${ms(d.validMs)}</td>
                <td>${d.partitions}</td>
                <td>${share(d.share)}</td>
                <td>${d.ranges === '' ? '–' : d.ranges}</td>
                <td>${time(d.joinedAt)}</td>
                <td>${time(d.lastTakenAt)}</td>
              </tr>`,
          )}
        </tbody>
      </table>
      <p class="muted">
        delivering: its heartbeat holds and it delivers; waiting: it delivers nothing while a
        dispatcher of the 'leases' mode works the table; gone: its heartbeat ran out (a crash, a
        freeze, a cut connection) and the others take its partitions over.
      </p>
      <h2>Latest moves</h2>
      <p class="muted">
        The tables keep no history of hand-overs and takeovers: these are each partition's last
        move, those of one moment and owner together. A partition's generation counts the times it
        was taken.
      </p>
      ${
        latest.length === 0
          ? html`<p id="no-moves">No partition has moved yet.</p>`
          : html`<table id="partition-moves">
              <thead>
                <tr>
                  <th>At</th>
                  <th>To</th>
                  <th>Partitions</th>
                  <th>Ranges</th>
                </tr>
              </thead>
              <tbody>
                ${latest.map(
                  (m) =>
                    html`<tr>
                      <td>${time(m.at)}</td>
                      <td>${m.owner ?? 'given up'}</td>
                      <td>${m.partitions}</td>
                      <td>${m.ranges}</td>
                    </tr>`,
                )}
              </tbody>
            </table>`
      }
      <details>
        <summary>Every partition</summary>
        <table id="partition-owners">
          <thead>
            <tr>
              <th>Partition</th>
              <th>Owner</th>
              <th>Generation</th>
              <th>Since</th>
            </tr>
          </thead>
          <tbody>
            ${view.partitions.map(
              (p) =>
                html`<tr>
                  <td>${p.partition}</td>
                  <td>${p.owner ?? 'free'}</td>
                  <td>${p.generation}</td>
                  <td>${time(p.since)}</td>
                </tr>`,
            )}
          </tbody>
        </table>
      </details>`,
  );
}
