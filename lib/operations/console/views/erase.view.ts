import { html, type Html } from '../console-html';
import type { OutboxErasureReport } from '../../../module/admin/outbox-erasure.interfaces';
import { csrfField, layout, type ViewContext } from './layout.view';

/**
 * The Erase page: one subject's id and why, and a box to tick, since an erasure cannot be undone.
 * The subject is never echoed back into a page or the console's log.
 */
export function erasePage(ctx: ViewContext, note: string | null = null): Html {
  const form = ctx.readOnly
    ? html`<p class="muted">The console is read-only: erasures are off.</p>`
    : html`<form method="post" action="${ctx.base}/erase/run" class="bulk" id="erase-form">
        ${csrfField(ctx)}
        <label
          >Subject id
          <input name="subject" id="subject" required maxlength="255" autocomplete="off"
        /></label>
        <label>Reason <input name="reason" id="reason" required maxlength="500" /></label>
        <label
          ><input type="checkbox" name="irreversible" value="yes" required /> I understand this
          cannot be undone</label
        >
        <button type="submit" id="confirm">Erase</button>
      </form>`;
  return layout(
    ctx,
    'Erase a subject',
    html`${note === null ? '' : html`<p class="notice" role="alert">${note}</p>`}
      <p class="muted">
        Destroys the subject's data key: every copy of its sealed personal data (the outbox, its
        archive, re-drive copies, the brokers' and consumers' copies) can no longer be opened. An
        erasure notice goes to each key its messages used, after its last message there. The erasure
        is recorded in the audit log with the subject's hash, never the subject.
      </p>
      ${form}`,
  );
}

export function eraseDonePage(ctx: ViewContext, report: OutboxErasureReport): Html {
  return layout(
    ctx,
    report.erased ? 'Subject erased' : 'Nothing to erase',
    html`<p id="result" data-erased="${report.erased ? 'yes' : 'no'}">
        ${
          report.erased
            ? html`Data key <code>${report.keyId ?? ''}</code> destroyed; ${report.notices} erasure
                notice${report.notices === 1 ? '' : 's'} enqueued.`
            : html`The subject has no live data key (never sealed for, or erased already).`
        }
      </p>
      <p>
        <a href="${ctx.base}/erase">Erase page</a> · <a href="${ctx.base}/audit">Audit log</a>
      </p>`,
  );
}
