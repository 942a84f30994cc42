import { refuseUnknownCallOptions } from '../internal/known-keys';
import type {
  GapRepairAnswer,
  GapRepairClient,
  GapRepairRequest,
} from '../module/admin/gap-repair.interfaces';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { GapRepairRequestError } from './gap-repair-request.error';
import { InboxMessages } from './inbox.messages';

/** Options of `httpGapRepairClient()`. */
export interface HttpGapRepairClientOptions {
  /** The producer's route, e.g. `'https://orders.internal/outbox/gap-repair'`. */
  readonly url: string;
  /**
   * Headers sent with each request (e.g. `authorization`), or a function giving them (a token
   * that rotates). Never logged.
   */
  readonly headers?:
    | Readonly<Record<string, string>>
    | (() => Readonly<Record<string, string>> | Promise<Readonly<Record<string, string>>>);
  /** How long one request may take, in ms. @default 5000 */
  readonly timeoutMs?: number;
}

const isNumbers = (value: unknown): value is number[] =>
  Array.isArray(value) && value.every((n) => typeof n === 'number');

/** Why fetch failed: its own message says only "fetch failed"; the cause names the socket's error. */
function reasonOf(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: unknown }).cause;
  return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
}

/** The body as an answer, or null when it is not one. */
function answerOf(body: unknown): GapRepairAnswer | null {
  if (typeof body !== 'object' || body === null) return null;
  const a = body as Record<string, unknown>;
  if (a.status !== 'answered' && a.status !== 'rate-limited') return null;
  for (const list of ['resent', 'pending', 'dead', 'gone']) {
    if (!isNumbers(a[list])) return null;
  }
  return body as GapRepairAnswer;
}

/**
 * The gap-repair port over HTTP: POSTs each request as JSON to the producer's route
 * (`OutboxGapRepairModule`, `nestjs-outbox/gap-repair`) with Node's `fetch`, and reads its
 * answer; a 429 is the answer `rate-limited`. Rejects with `GapRepairRequestError` when no
 * answer came (unreachable, timeout, 4xx/5xx).
 */
export function httpGapRepairClient(options: HttpGapRepairClientOptions): GapRepairClient {
  refuseUnknownCallOptions('httpGapRepairClient()', options, {
    '': { url: true, headers: true, timeoutMs: true } satisfies Record<
      keyof HttpGapRepairClientOptions,
      true
    >,
  });
  let url: URL;
  try {
    url = new URL(options.url);
  } catch {
    throw new OutboxOptionsError(
      InboxMessages.optionInvalid(
        'url',
        `${JSON.stringify(options.url)} is not a URL`,
        "Give the producer's route, e.g. 'http://orders:3000/outbox/gap-repair'.",
      ),
      'url',
    );
  }
  const timeoutMs = options.timeoutMs ?? 5_000;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) {
    throw new OutboxOptionsError(
      InboxMessages.optionInvalid(
        'timeoutMs',
        `${String(timeoutMs)} is not a whole number of ms`,
        'e.g. 5000.',
      ),
      'timeoutMs',
    );
  }
  return {
    async request(request: GapRepairRequest): Promise<GapRepairAnswer> {
      const extra =
        typeof options.headers === 'function' ? await options.headers() : (options.headers ?? {});
      let response: Response;
      try {
        response = await fetch(url, {
          method: 'POST',
          headers: { ...extra, 'content-type': 'application/json', accept: 'application/json' },
          body: JSON.stringify(request),
          signal: AbortSignal.timeout(timeoutMs),
        });
      } catch (error) {
        throw new GapRepairRequestError(
          `The gap-repair request to ${url.origin}${url.pathname} failed: ${reasonOf(error)}`,
          null,
        );
      }
      const body: unknown = await response.json().catch(() => null);
      const answer = answerOf(body);
      if ((response.ok || response.status === 429) && answer !== null) return answer;
      throw new GapRepairRequestError(
        `The gap-repair route ${url.origin}${url.pathname} answered HTTP ${response.status}` +
          (typeof (body as { message?: unknown } | null)?.message === 'string'
            ? `: ${(body as { message: string }).message}`
            : ''),
        response.status,
      );
    },
  };
}
