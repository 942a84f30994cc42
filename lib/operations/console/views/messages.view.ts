import { html, type Html } from '../console-html';
import { filterParams, STATUSES } from '../console-input';
import type {
  OutboxDeadLetterFilter,
  OutboxMessageStatus,
  OutboxMessageSummary,
  OutboxPage,
} from '../../../module/admin/outbox-admin.interfaces';
import { csrfField, duration, layout, query, time, type ViewContext } from './layout.view';

function filterForm(
  ctx: ViewContext,
  status: OutboxMessageStatus,
  filter: OutboxDeadLetterFilter,
  tenants: boolean,
): Html {
  const value = (name: string): string => filterParams(filter).find(([k]) => k === name)?.[1] ?? '';
  return html`<form method="get" action="${ctx.base}/messages" class="filters" id="filter-form">
    <label
      >Status
      <select name="status">
        ${STATUSES.map(
          (s) => html`<option value="${s}" ${s === status ? html` selected` : ''}>${s}</option>`,
        )}
      </select></label
    >
    <label>Topic <input name="topic" value="${value('topic')}" /></label>
    <label>Type <input name="type" value="${value('type')}" /></label>
    <label>Key <input name="key" value="${value('key')}" /></label>
    ${tenants ? html`<label>Tenant <input name="tenant" value="${value('tenant')}" /></label>` : ''}
    <label>Error contains <input name="error" value="${value('error')}" /></label>
    <label
      >Older than (min)
      <input name="olderThanMinutes" inputmode="decimal" value="${value('olderThanMinutes')}"
    /></label>
    <button type="submit">Filter</button>
  </form>`;
}

function bulkActions(ctx: ViewContext, filter: OutboxDeadLetterFilter): Html {
  if (ctx.readOnly) return html``;
  const hidden = filterParams(filter).map(
    ([name, value]) => html`<input type="hidden" name="${name}" value="${value}" />`,
  );
  const named = filterParams(filter).length > 0;
  return html`<form
    method="post"
    action="${ctx.base}/actions/confirm"
    class="bulk"
    id="filter-actions"
  >
    ${csrfField(ctx)}<input type="hidden" name="scope" value="filter" />${hidden}
    ${
      named
        ? html`<button name="action" value="retry">Retry all matching…</button>
            <button name="action" value="purge" class="danger">Purge all matching…</button>`
        : html`<span class="muted"
            >Filter first to act on all matching dead letters (e.g. older than 0 minutes for every
            one).</span
          >`
    }
  </form>`;
}

export function messagesPage(
  ctx: ViewContext,
  status: OutboxMessageStatus,
  filter: OutboxDeadLetterFilter,
  page: OutboxPage<OutboxMessageSummary>,
  /** Whether the app has tenant ids (`tenants`): a Tenant filter and column. */
  tenants = false,
): Html {
  const dead = status === 'dead';
  const selectable = dead && !ctx.readOnly;
  const next =
    page.nextCursor === null
      ? ''
      : html`<a
          id="next-page"
          href="${ctx.base}/messages${query([
            ['status', status],
            ...filterParams(filter),
            ['after', page.nextCursor],
          ])}"
          >Next page →</a
        >`;
  const rows = page.items.map(
    (m) =>
      html`<tr data-message-id="${m.messageId}">
        ${selectable ? html`<td><input type="checkbox" name="id" value="${m.messageId}" form="selection" aria-label="select ${m.messageId}" /></td>` : ''}
        <td><a href="${ctx.base}/messages/${m.messageId}">${m.messageId}</a></td>
        <td>${m.topic}</td>
        <td>${m.type}</td>
        <td>${m.key ?? html`<span class="muted">none</span>`}</td>
        ${tenants ? html`<td>${m.tenant ?? html`<span class="muted">none</span>`}</td>` : ''}
        <td>${m.attempts}</td>
        <td class="error">${m.lastError ?? ''}</td>
        <td title="${time(m.createdAt)}">${duration(m.ageMs)}</td>
        <td>${time(dead ? m.deadAt : m.availableAt)}</td>
      </tr>`,
  );
  return layout(
    ctx,
    dead ? 'Dead letters' : `Messages: ${status}`,
    html`${filterForm(ctx, status, filter, tenants)} ${dead ? bulkActions(ctx, filter) : ''}
      ${
        page.items.length === 0
          ? html`<p id="empty">No ${status} message matches.</p>`
          : html`<table id="messages">
                <thead>
                  <tr>
                    ${selectable ? html`<th><input type="checkbox" id="select-all" aria-label="select all on this page" /></th>` : ''}
                    <th>Message id</th>
                    <th>Topic</th>
                    <th>Type</th>
                    <th>Key</th>
                    ${tenants ? html`<th>Tenant</th>` : ''}
                    <th>Attempts</th>
                    <th>Last error</th>
                    <th>Age</th>
                    <th>${dead ? 'Dead since' : 'Due'}</th>
                  </tr>
                </thead>
                <tbody>
                  ${rows}
                </tbody>
              </table>
              ${
                selectable
                  ? html`<form
                      method="post"
                      action="${ctx.base}/actions/confirm"
                      id="selection"
                      class="bulk"
                    >
                      ${csrfField(ctx)}<input type="hidden" name="scope" value="selection" />
                      <button name="action" value="retry">Retry selected…</button>
                      <button name="action" value="purge" class="danger">Purge selected…</button>
                    </form>`
                  : ''
              }`
      }
      <p class="pager">${next}</p>`,
  );
}
