import { ReplyError } from 'ioredis';

/**
 * What a failed command of a batch's pipeline means for its message, decided by the error code
 * Redis puts first in an error reply (RESP: `-WRONGTYPE …`, `-OOM …`), never by the rest of its
 * text, and by whether the error is a reply at all:
 * - `permanent`: Redis can never add this entry as it is (the key holds another type).
 * - `outage`: Redis is up but refuses writes for now (out of memory, a read-only replica, still
 *   loading, a failing disk, a busy script, a refused login or ACL), or did not answer at all
 *   (the connection was lost or closed); nothing is wrong with the message.
 * - `retry`: any other error reply; the message is retried with backoff and counts an attempt.
 */
export type RedisFailureKind = 'permanent' | 'outage' | 'retry';

const PERMANENT_CODES = new Set(['WRONGTYPE']);
const OUTAGE_CODES = new Set([
  'OOM',
  'READONLY',
  'LOADING',
  'MASTERDOWN',
  'MISCONF',
  'BUSY',
  'NOAUTH',
  'WRONGPASS',
  'NOPERM',
  'NOREPLICAS',
  'CLUSTERDOWN',
  'TRYAGAIN',
  'MOVED',
  'ASK',
]);

// ioredis types ReplyError as `any`; both its majors throw instances of it for error replies.
const REPLY_ERROR = ReplyError as new (...args: never[]) => Error;

/** The error code of an error reply (`WRONGTYPE`), or undefined for an error that is no reply. */
export function redisErrorCode(error: unknown): string | undefined {
  if (!(error instanceof REPLY_ERROR)) return undefined;
  const code = /^[A-Z][A-Z_-]*(?= |$)/.exec(error.message)?.[0];
  return code ?? 'ERR';
}

export function classifyRedisError(error: unknown): RedisFailureKind {
  const code = redisErrorCode(error);
  if (code === undefined) return 'outage';
  if (PERMANENT_CODES.has(code)) return 'permanent';
  return OUTAGE_CODES.has(code) ? 'outage' : 'retry';
}
