import { errorChain } from '../kit/error-chain';

/**
 * What a failed JetStream publish means for its message, told from the error classes' `name`,
 * the JetStream API's `err_code` and status and the cause chain, never from message text (and
 * never by `instanceof`: `@nats-io/jetstream` and `@nats-io/transport-node` may each bring a
 * copy of `@nats-io/nats-core`):
 * - `timeout`: no `PubAck` within the timeout; the stream may have stored the message.
 * - `closed`: the connection closed under the publish (server gone, link dead, `close()`).
 * - `no-stream`: no responders on the subject: no stream captures it, or its stream did not
 *   answer (JetStream down, a leader election); a lookup tells which.
 * - `unavailable`: JetStream answered 503 (not ready, no quorum, out of resources).
 * - `refused`: the stream refused the message for what it is: too large for the stream
 *   (`max_msg_size`), or it landed in another stream than `Nats-Expected-Stream` named.
 * - `unsendable`: the client refused to write it (over the server's `max_payload`, a header it
 *   cannot encode); nothing was sent.
 * - `other`: anything else (the stream is full with `discard: new`, a permission violation …),
 *   retried by the retry policy.
 */
export type JetStreamFailureKind =
  'timeout' | 'closed' | 'no-stream' | 'unavailable' | 'refused' | 'unsendable' | 'other';

/** The JetStream API's `err_code`s of a message the stream can never take as it is. */
export const JETSTREAM_REFUSED_CODES: ReadonlySet<number> = new Set([
  10054, // message size exceeds maximum allowed (the stream's max_msg_size)
  10060, // expected stream does not match (Nats-Expected-Stream)
]);

const CLOSED_NAMES = new Set([
  'RequestError',
  'ClosedConnectionError',
  'DrainingConnectionError',
  'ConnectionError',
]);

interface ErrorLike {
  name?: unknown;
  code?: unknown;
  status?: unknown;
  cause?: unknown;
  isNoResponders?: unknown;
}

function noResponders(e: ErrorLike): boolean {
  if (e.name === 'NoRespondersError') return true;
  return (
    e.name === 'RequestError' &&
    typeof e.isNoResponders === 'function' &&
    (e.isNoResponders as () => unknown).call(e) === true
  );
}

/** Classifies the rejection of `js.publish()`; `closed` says whether its connection has closed. */
export function classifyJetStreamError(error: unknown, closed: boolean): JetStreamFailureKind {
  const errors = errorChain<ErrorLike>(error);
  const names = errors.map((e) => e.name);
  if (errors.some(noResponders)) return 'no-stream';
  const api = errors.find((e) => e.name === 'JetStreamApiError' || typeof e.status === 'number');
  if (api !== undefined && typeof api.code === 'number') {
    if (JETSTREAM_REFUSED_CODES.has(api.code)) return 'refused';
    if (api.status === 503) return 'unavailable';
    return 'other';
  }
  if (names.includes('InvalidArgumentError')) return 'unsendable';
  if (names.includes('PermissionViolationError')) return 'other';
  if (names.includes('TimeoutError')) return closed ? 'closed' : 'timeout';
  // A request rejected for no answer of the server's ("connection closed", "connection
  // disconnected", "cancelled"): its connection went away under it.
  if (closed || names.some((n) => typeof n === 'string' && CLOSED_NAMES.has(n))) return 'closed';
  return 'other';
}
