import { html, type Html } from '../console-html';
import { redriveFilterParams, type RedriveTyped } from '../console-redrive-input';
import type {
  OutboxRedriveFilter,
  OutboxRedrivePreview,
  OutboxRedriveRecord,
  OutboxRedriveReport,
} from '../../../module/admin/outbox-redrive.interfaces';
import { csrfField, layout, time, type ViewContext } from './layout.view';

/** The past re-drives, or why they cannot be read (no audit table). */
export type RedriveHistory =
  { readonly records: readonly OutboxRedriveRecord[] } | { readonly problem: string };

function filterForm(ctx: ViewContext, filter: OutboxRedriveFilter): Html {
  const given = new Map(redriveFilterParams(filter));
  // datetime-local shows minutes; the ISO text's zone is dropped, the console's times are UTC.
  const at = (name: string): string => given.get(name)?.slice(0, 16) ?? '';
  return html`<form method="get" action="${ctx.base}/redrive" class="filters" id="redrive-filter">
    <label>Topic <input name="topic" value="${given.get('topic') ?? ''}" /></label>
    <label>Type <input name="type" value="${given.get('type') ?? ''}" /></label>
    <label>Key <input name="key" value="${given.get('key') ?? ''}" /></label>
    <label
      >Enqueued from (UTC)
      <input type="datetime-local" name="createdAfter" value="${at('createdAfter')}"
    /></label>
    <label
      >until <input type="datetime-local" name="createdBefore" value="${at('createdBefore')}"
    /></label>
    <label
      >Delivered from (UTC)
      <input type="datetime-local" name="deliveredAfter" value="${at('deliveredAfter')}"
    /></label>
    <label
      >until <input type="datetime-local" name="deliveredBefore" value="${at('deliveredBefore')}"
    /></label>
    <button type="submit" id="preview">Preview</button>
  </form>`;
}

function previewBlock(
  ctx: ViewContext,
  filter: OutboxRedriveFilter,
  preview: OutboxRedrivePreview,
  typed: RedriveTyped,
): Html {
  const where = preview.includesArchive ? 'in the outbox and its archive' : 'in the outbox';
  const count = html`<p id="matched" data-count="${preview.count}">
    <strong>${preview.count}</strong> delivered message${preview.count === 1 ? '' : 's'} ${where}
    match${preview.count === 1 ? 'es' : ''}.
  </p>`;
  if (preview.count === 0) return count;
  const sample = html`<table id="redrive-sample">
    <thead>
      <tr>
        <th>Id</th>
        <th>Message id</th>
        <th>Topic</th>
        <th>Key</th>
        <th>Type</th>
        <th>Enqueued</th>
        <th>Delivered</th>
        <th>From</th>
      </tr>
    </thead>
    <tbody>
      ${preview.sample.map(
        (m) =>
          html`<tr>
            <td>${m.id}</td>
            <td><code>${m.messageId}</code></td>
            <td>${m.topic}</td>
            <td>${m.key ?? '–'}</td>
            <td>${m.type}</td>
            <td>${time(m.createdAt)}</td>
            <td>${time(m.deliveredAt)}</td>
            <td>${m.source}</td>
          </tr>`,
      )}
    </tbody>
  </table>`;
  const shown =
    preview.sample.length < preview.count
      ? html`<p class="muted">The first ${preview.sample.length}, in queue order.</p>`
      : '';
  const confirm = ctx.readOnly
    ? html`<p class="muted">The console is read-only: re-drives are off.</p>`
    : preview.confirmation === null
      ? html`<p class="notice" id="too-many">
          More than ${preview.maxCount} messages: one re-drive sends at most that many. Narrow the
          filter (a delivery time range, a key).
        </p>`
      : html`<form method="post" action="${ctx.base}/redrive/run" class="bulk" id="redrive-form">
            ${csrfField(ctx)}
            ${redriveFilterParams(filter).map(
              ([k, v]) => html`<input type="hidden" name="${k}" value="${v}" />`,
            )}
            <input type="hidden" name="expected" value="${preview.confirmation}" />
            <label
              >Reason
              <input
                name="reason"
                id="reason"
                required
                maxlength="500"
                value="${typed.reason ?? ''}"
            /></label>
            <label
              >To topic
              <input
                name="destination"
                placeholder="each message's own topic"
                value="${typed.destination ?? ''}"
            /></label>
            <label
              >Per second
              <input
                name="rate"
                inputmode="decimal"
                placeholder="all at once"
                value="${typed.rate ?? ''}"
            /></label>
            <button type="submit" id="confirm">Re-drive ${preview.count}</button>
          </form>
          <p class="muted">
            Each is sent again as a new message (a new id, so consumers' inboxes take it) with the
            headers x-outbox-redrive-of and x-outbox-redrive-id, in queue order; the re-drive is
            recorded in the audit log.
          </p>`;
  return html`${count}${sample}${shown}${confirm}`;
}

function historyBlock(history: RedriveHistory): Html {
  if ('problem' in history)
    return html`<p class="muted" id="redrive-history">${history.problem}</p>`;
  if (history.records.length === 0)
    return html`<p class="muted" id="redrive-history">No re-drive yet.</p>`;
  return html`<table id="redrive-history">
    <thead>
      <tr>
        <th>When</th>
        <th>Who</th>
        <th>Why</th>
        <th>Filter</th>
        <th>To</th>
        <th>Count</th>
        <th>Re-drive id</th>
      </tr>
    </thead>
    <tbody>
      ${history.records.map(
        (r) =>
          html`<tr>
            <td>${time(r.at)}</td>
            <td>${r.actor}</td>
            <td>${r.reason}</td>
            <td>
              ${Object.entries(r.filter)
                .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
                .join(' ')}
            </td>
            <td>
              ${r.destination ?? 'own topics'}${r.ratePerSecond === null ? '' : `, ${r.ratePerSecond}/s`}
            </td>
            <td>${r.count}</td>
            <td><code>${r.redriveId}</code></td>
          </tr>`,
      )}
    </tbody>
  </table>`;
}

/**
 * The Re-drive page: the filter, its preview (count and the first messages) with the
 * confirmation form, and the past re-drives. `note` heads it (a refusal to confirm again), and
 * `typed` fills the form with what the refused confirmation carried.
 */
export function redrivePage(
  ctx: ViewContext,
  filter: OutboxRedriveFilter,
  preview: OutboxRedrivePreview | null,
  history: RedriveHistory,
  note: string | null = null,
  typed: RedriveTyped = {},
): Html {
  return layout(
    ctx,
    'Re-drive delivered messages',
    html`${note === null ? '' : html`<p class="notice" role="alert">${note}</p>`}
      <p class="muted">
        Send delivered messages again, chosen by topic, key, type and time. At least one field.
      </p>
      ${filterForm(ctx, filter)}
      ${preview === null ? '' : previewBlock(ctx, filter, preview, typed)}
      <h2>Past re-drives</h2>
      ${historyBlock(history)}`,
  );
}

export function redriveDonePage(ctx: ViewContext, report: OutboxRedriveReport): Html {
  const to = report.destination === null ? 'their own topics' : report.destination;
  const pace = report.ratePerSecond === null ? '' : `, ${report.ratePerSecond} per second`;
  return layout(
    ctx,
    'Re-drive written',
    html`<p id="result" data-count="${report.count}">
        ${report.count} message${report.count === 1 ? '' : 's'} re-driven to ${to}${pace} (re-drive
        <code>${report.redriveId}</code>).
      </p>
      <p>
        <a href="${ctx.base}/redrive">Re-drive page</a> ·
        <a href="${ctx.base}/audit">Audit log</a>
      </p>`,
  );
}
