import { html, type Html } from '../console-html';
import type {
  OutboxAttempt,
  OutboxMessageDetail,
  OutboxPolicyView,
  OutboxWhy,
} from '../../../module/admin/outbox-admin.interfaces';
import { csrfField, duration, layout, time, type ViewContext } from './layout.view';
import { describeBinary, hexPreview } from '../../../module/admin/binary-preview';
import { REDRIVE_OF_HEADER } from '../../../module/admin/outbox-redrive';
import { isMessageId } from '../console-input';

/** The payload pretty-printed when it is JSON (it always is when enqueued by this library). */
export function prettyPayload(payload: string): string {
  try {
    return JSON.stringify(JSON.parse(payload), null, 2);
  } catch {
    return payload;
  }
}

function explanation(ctx: ViewContext, why: OutboxWhy): Html {
  return html`<section id="why">
    <h2>${why.state === 'delivered' ? 'Delivered' : 'Why is it not out?'}</h2>
    <p><span class="badge">${why.state}</span> ${why.reason}</p>
    ${
      why.head === null
        ? ''
        : html`<p>
            Held back by
            <a href="${ctx.base}/messages/${why.head.messageId}">${why.head.messageId}</a>
            (${why.head.status})${why.head.lastError === null ? '' : html`: <span class="error">${why.head.lastError}</span>`}
          </p>`
    }
  </section>`;
}

/** The failed attempts, oldest first; every value goes through `html` and is escaped. */
function attemptHistory(attempts: readonly OutboxAttempt[]): Html {
  if (attempts.length === 0) return html`<p class="muted" id="attempts">No failed attempt.</p>`;
  return html`<table id="attempts">
    <thead>
      <tr>
        <th>Attempt</th>
        <th>Outcome</th>
        <th>Failed at</th>
        <th>Dispatcher</th>
        <th>Error class</th>
        <th>Error</th>
      </tr>
    </thead>
    <tbody>
      ${attempts.map(
        (a) =>
          html`<tr>
            <td>${a.attempt}</td>
            <td><span class="badge">${a.outcome}</span></td>
            <td>${time(a.failedAt)}</td>
            <td>${a.lockedBy ?? '–'}</td>
            <td>${a.errorClass ?? '–'}</td>
            <td class="error">${a.error ?? '–'}</td>
          </tr>`,
      )}
    </tbody>
  </table>`;
}

/** A span of time, below a second in ms (a backoff of 300 ms is not "0 s"). */
const span = (ms: number): string => (ms < 1000 ? `${ms} ms` : duration(ms));

/** One line of a resolved policy: its name and what it sets. */
export function policySummary(policy: OutboxPolicyView): Html {
  const { retry } = policy;
  return html`<span class="badge">${policy.name}</span> onDeadLetter ${policy.onDeadLetter},
    maxAttempts ${String(retry.maxAttempts)}, backoff ${span(retry.initialDelayMs)} to
    ${span(retry.maxDelayMs)}, expiry ${policy.maxAgeMs === 0 ? 'none' : span(policy.maxAgeMs)},
    delivered kept ${span(policy.deliveredRetentionMs)}, dead kept
    ${policy.deadRetentionMs === null ? 'until purged' : span(policy.deadRetentionMs)}`;
}

/** A header's value; the original of a re-drive copy as a link to its page. */
function headerValue(ctx: ViewContext, name: string, value: string): Html | string {
  if (name !== REDRIVE_OF_HEADER || !isMessageId(value)) return value;
  return html`<a href="${ctx.base}/messages/${value.toLowerCase()}" id="redrive-of">${value}</a>`;
}

export function messagePage(ctx: ViewContext, message: OutboxMessageDetail, why: OutboxWhy): Html {
  const headers = Object.entries(message.headers);
  const actions =
    message.status === 'dead' && !ctx.readOnly
      ? html`<form method="post" action="${ctx.base}/actions/confirm" class="bulk">
          ${csrfField(ctx)}<input type="hidden" name="scope" value="selection" /><input
            type="hidden"
            name="id"
            value="${message.messageId}"
          />
          <button name="action" value="retry">Retry…</button>
          <button name="action" value="purge" class="danger">Purge…</button>
        </form>`
      : '';
  return layout(
    ctx,
    `Message ${message.messageId}`,
    html`${explanation(ctx, why)} ${actions}
      <h2>Message</h2>
      <table class="fields" id="fields">
        <tr>
          <th>Status</th>
          <td>${message.status}</td>
        </tr>
        <tr>
          <th>Topic</th>
          <td>${message.topic}</td>
        </tr>
        <tr>
          <th>Type</th>
          <td>${message.type}</td>
        </tr>
        <tr>
          <th>Key</th>
          <td>${message.key ?? html`<span class="muted">none</span>`}</td>
        </tr>
        <tr>
          <th>Policy</th>
          <td id="policy">${policySummary(message.policy)}</td>
        </tr>
        <tr>
          <th>Row id (queue position)</th>
          <td>${message.id}</td>
        </tr>
        <tr>
          <th>Attempts</th>
          <td>${message.attempts}</td>
        </tr>
        <tr>
          <th>Last error</th>
          <td class="error" id="last-error">${message.lastError ?? '–'}</td>
        </tr>
        <tr>
          <th>Enqueued</th>
          <td>${time(message.createdAt)} (${duration(message.ageMs)} ago)</td>
        </tr>
        <tr>
          <th>Last attempt</th>
          <td>${time(message.lastAttemptAt)}</td>
        </tr>
        ${
          // Due means something only while the message waits to be sent.
          message.status === 'pending' || message.status === 'waiting'
            ? html`<tr>
                <th>Due</th>
                <td>${time(message.availableAt)}</td>
              </tr>`
            : ''
        }
        <tr>
          <th>Delivered</th>
          <td>${time(message.deliveredAt)}</td>
        </tr>
        <tr>
          <th>Dead since</th>
          <td>${time(message.deadAt)}</td>
        </tr>
        <tr>
          <th>Lease</th>
          <td>
            ${message.lockedBy === null ? '–' : html`${message.lockedBy} until ${time(message.lockedUntil)}`}
          </td>
        </tr>
      </table>
      <h2>Attempt history</h2>
      ${attemptHistory(message.attemptHistory)}
      <h2>Headers</h2>
      ${
        headers.length === 0
          ? html`<p class="muted">none</p>`
          : html`<table class="fields" id="headers">
              ${headers.map(
                ([k, v]) =>
                  html`<tr>
                    <th>${k}</th>
                    <td>${headerValue(ctx, k, v)}</td>
                  </tr>`,
              )}
            </table>`
      }
      <h2>Payload</h2>
      ${
        message.encoding === 'binary' && message.payloadBytes !== null
          ? html`<p id="payload-kind">
                ${describeBinary(message.payloadBytes, message.contentType)}
              </p>
              <pre id="payload">${hexPreview(message.payloadBytes)}</pre>`
          : html`<pre id="payload">${prettyPayload(message.payload)}</pre>`
      }`,
  );
}

export function whyPage(ctx: ViewContext, id: string | undefined, why: OutboxWhy | null): Html {
  return layout(
    ctx,
    'Explain a message',
    html`<form method="get" action="${ctx.base}/why" class="filters">
        <label>Message id <input name="id" size="40" value="${id ?? ''}" required /></label>
        <button type="submit">Explain</button>
      </form>
      ${
        why === null
          ? ''
          : html`${explanation(ctx, why)}${why.message === null ? '' : html`<p><a href="${ctx.base}/messages/${why.messageId}">Open the message</a></p>`}`
      }`,
  );
}
