import { html, type Html } from '../console-html';
import { filterParams } from '../console-input';
import type { OutboxDeadLetterFilter } from '../../../module/admin/outbox-admin.interfaces';
import type { OutboxConsoleAuditEntry } from '../console.options';
import { csrfField, layout, query, time, type ViewContext } from './layout.view';

/** What a confirmed action will act on: ids ticked in a list, or the dead letters of a filter. */
export type ConsoleSelection =
  | { readonly scope: 'selection'; readonly ids: readonly string[] }
  | { readonly scope: 'filter'; readonly filter: OutboxDeadLetterFilter };

export function confirmPage(
  ctx: ViewContext,
  action: 'retry' | 'purge',
  selection: ConsoleSelection,
  matched: number,
  described: string,
): Html {
  const verb = action === 'retry' ? 'Retry' : 'Purge';
  const fields =
    selection.scope === 'selection'
      ? selection.ids.map((id) => html`<input type="hidden" name="id" value="${id}" />`)
      : filterParams(selection.filter).map(
          ([k, v]) => html`<input type="hidden" name="${k}" value="${v}" />`,
        );
  const back = html`<a
    href="${ctx.base}/messages${query(
      selection.scope === 'filter'
        ? [['status', 'dead'], ...filterParams(selection.filter)]
        : [['status', 'dead']],
    )}"
    >Cancel</a
  >`;
  if (matched === 0) {
    return layout(
      ctx,
      `${verb}: nothing to do`,
      html`<p id="matched" data-count="0">No dead letter matches ${described}.</p>
        <p>${back}</p>`,
    );
  }
  const effect =
    action === 'retry'
      ? "They go back to the queue with their attempts reset, each where the order of its key allows (a dead head that blocks its key is retried in place; others go behind the key's queued messages)."
      : 'They are deleted for good; the later messages of their keys move on.';
  return layout(
    ctx,
    `${verb} ${matched} dead letter${matched === 1 ? '' : 's'}?`,
    html`<p id="matched" data-count="${matched}">
        <strong>${matched}</strong> dead letter${matched === 1 ? '' : 's'}
        match${matched === 1 ? 'es' : ''} ${described}.
      </p>
      <p>${effect}</p>
      <form method="post" action="${ctx.base}/actions/run" class="bulk" id="confirm-form">
        ${csrfField(ctx)}<input type="hidden" name="action" value="${action}" /><input
          type="hidden"
          name="scope"
          value="${selection.scope}"
        />
        <input type="hidden" name="expected" value="${matched}" />${fields}
        <button type="submit" id="confirm" class="${action === 'purge' ? 'danger' : ''}">
          ${verb} ${matched}
        </button>
        ${back}
      </form>`,
  );
}

export function resultPage(
  ctx: ViewContext,
  entry: OutboxConsoleAuditEntry,
  /** Dead letters a retry refused because they expired. */
  expired: readonly string[] = [],
): Html {
  const done = entry.action === 'retry' ? 'requeued' : 'purged';
  return layout(
    ctx,
    'Done',
    html`<p id="result" data-count="${entry.affected}">
        ${entry.affected} dead letter${entry.affected === 1 ? '' : 's'} ${done} (${entry.target}).
      </p>
      ${
        expired.length === 0
          ? ''
          : html`<p id="expired" data-count="${expired.length}" role="alert">
              ${expired.length} not retried: ${expired.length === 1 ? 'it' : 'they'} expired (the
              type's maxAgeMs), so a retry would only dead-letter
              ${expired.length === 1 ? 'it' : 'them'} again unpublished. Purge
              ${expired.length === 1 ? 'it' : 'them'}, and enqueue the content again as a new
              message if it is still wanted.
            </p>`
      }
      <p>
        <a href="${ctx.base}/messages?status=dead">Back to the dead letters</a> ·
        <a href="${ctx.base}/audit">Audit log</a>
      </p>`,
  );
}

/** An action that failed part-way: what was done before, and where to read why. */
export function stoppedPage(ctx: ViewContext, entry: OutboxConsoleAuditEntry, done: number): Html {
  const verb = entry.action === 'retry' ? 'requeued' : 'purged';
  return layout(
    ctx,
    'Stopped part-way',
    html`<p id="result" data-count="${done}" role="alert">
        ${done} of the ${entry.confirmed} dead letters were ${verb} (${entry.target}); the rest
        failed, and are left as they were. The reason is in the server log; the audit log has what
        was done.
      </p>
      <p>
        <a href="${ctx.base}/messages?status=dead">Back to the dead letters</a> ·
        <a href="${ctx.base}/audit">Audit log</a>
      </p>`,
  );
}

export function auditPage(
  ctx: ViewContext,
  entries: readonly OutboxConsoleAuditEntry[],
  durable: boolean,
): Html {
  return layout(
    ctx,
    'Audit log',
    html`<p class="muted">
        ${
          durable
            ? 'The last 500 actions taken through the console, from its audit table.'
            : "The last 500 actions taken through this instance's console since it started (kept in memory and logged: give the option auditTable to keep them)."
        }
      </p>
      ${
        entries.length === 0
          ? html`<p id="empty">No action yet.</p>`
          : html`<table id="audit">
              <thead>
                <tr>
                  <th>When</th>
                  <th>Who</th>
                  <th>Action</th>
                  <th>On</th>
                  <th>Confirmed</th>
                  <th>Affected</th>
                </tr>
              </thead>
              <tbody>
                ${entries.map(
                  (e) =>
                    html`<tr>
                      <td>${time(e.at)}</td>
                      <td>${e.actor}</td>
                      <td>${e.action}</td>
                      <td>${e.scope}: ${e.target}</td>
                      <td>${e.confirmed}</td>
                      <td>${e.affected}</td>
                    </tr>`,
                )}
              </tbody>
            </table>`
      }`,
  );
}
