import { html, type Html } from '../console-html';
import type {
  OutboxBlockedKey,
  OutboxPage,
  OutboxStuckLease,
} from '../../../module/admin/outbox-admin.interfaces';
import { duration, layout, query, time, type ViewContext } from './layout.view';

const nextLink = (
  ctx: ViewContext,
  path: string,
  cursor: string | null,
  extra: [string, string][] = [],
): Html | string =>
  cursor === null
    ? ''
    : html`<p class="pager">
        <a id="next-page" href="${ctx.base}${path}${query([...extra, ['after', cursor]])}"
          >Next page →</a
        >
      </p>`;

export function blockedKeysPage(ctx: ViewContext, page: OutboxPage<OutboxBlockedKey>): Html {
  return layout(
    ctx,
    'Blocked keys',
    html`<p class="muted">
        Keys whose head cannot go (dead, with ordering.onDeadLetter 'block', or backing off after a
        failure) and holds later messages back. Oldest head first.
      </p>
      ${
        page.items.length === 0
          ? html`<p id="empty">No key is blocked (with ordering off, none can be).</p>`
          : html`<table id="blocked-keys">
              <thead>
                <tr>
                  <th>Key</th>
                  <th>Head</th>
                  <th>Head status</th>
                  <th>Attempts</th>
                  <th>Last error</th>
                  <th>Next attempt</th>
                  <th>Waiting</th>
                  <th>Oldest waiting</th>
                </tr>
              </thead>
              <tbody>
                ${page.items.map(
                  (k) =>
                    html`<tr>
                      <td>${k.key}</td>
                      <td>
                        <a href="${ctx.base}/messages/${k.headMessageId}">${k.headMessageId}</a>
                      </td>
                      <td>${k.headStatus}</td>
                      <td>${k.headAttempts}</td>
                      <td class="error">${k.lastError ?? ''}</td>
                      <td>${time(k.nextAttemptAt)}</td>
                      <td>${k.waiting}</td>
                      <td>${duration(k.oldestWaitingAgeMs)}</td>
                    </tr>`,
                )}
              </tbody>
            </table>`
      }
      ${nextLink(ctx, '/blocked-keys', page.nextCursor)}`,
  );
}

export function stuckLeasesPage(
  ctx: ViewContext,
  page: OutboxPage<OutboxStuckLease>,
  leasedLongerThanMinutes: number | undefined,
): Html {
  const extra: [string, string][] =
    leasedLongerThanMinutes === undefined
      ? []
      : [['leasedLongerThanMinutes', String(leasedLongerThanMinutes)]];
  return layout(
    ctx,
    'Stuck leases',
    html`<form method="get" action="${ctx.base}/stuck-leases" class="filters">
        <label
          >Also live leases taken more than (min) ago
          <input
            name="leasedLongerThanMinutes"
            inputmode="decimal"
            value="${leasedLongerThanMinutes ?? ''}"
        /></label>
        <button type="submit">Show</button>
      </form>
      ${
        page.items.length === 0
          ? html`<p id="empty">No stuck lease.</p>`
          : html`<table id="stuck-leases">
              <thead>
                <tr>
                  <th>Message id</th>
                  <th>Topic</th>
                  <th>Owner</th>
                  <th>Since</th>
                  <th>Until</th>
                  <th>Expired</th>
                  <th>Attempts</th>
                </tr>
              </thead>
              <tbody>
                ${page.items.map(
                  (l) =>
                    html`<tr>
                      <td><a href="${ctx.base}/messages/${l.messageId}">${l.messageId}</a></td>
                      <td>${l.topic}</td>
                      <td>${l.lockedBy ?? '–'}</td>
                      <td>${time(l.lastAttemptAt)} (${duration(l.leasedForMs)})</td>
                      <td>${time(l.lockedUntil)}</td>
                      <td>${l.leaseExpired ? 'yes' : 'no'}</td>
                      <td>${l.attempts}</td>
                    </tr>`,
                )}
              </tbody>
            </table>`
      }
      ${nextLink(ctx, '/stuck-leases', page.nextCursor, extra)}`,
  );
}
