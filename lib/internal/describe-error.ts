import { MAX_ERROR_LENGTH } from '../store/outbox-row.mapper';

// user:password@ in connection URLs, and password-like key=value pairs.
const URL_CREDENTIALS = /([a-z][a-z0-9+.-]*:\/\/)([^:@/\s]*):([^@/\s]*)@/gi;
const SECRET_PAIRS =
  /\b(password|passwd|pwd|secret|token|api[_-]?key|sasl[_-]?password)(["']?\s*[:=]\s*["']?)([^\s"',;&]+)/gi;

/** Removes credentials from text that may reach logs or the `last_error` column. */
export function redactSecrets(text: string): string {
  return text.replace(URL_CREDENTIALS, '$1$2:***@').replace(SECRET_PAIRS, '$1$2***');
}

/** A short, credential-free description of an error, for logs and `last_error`. */
export function describeError(error: unknown): string {
  let text: string;
  if (error instanceof Error) {
    text = error.message === '' ? error.name : `${error.name}: ${error.message}`;
  } else if (typeof error === 'string') {
    text = error;
  } else {
    try {
      text = JSON.stringify(error) ?? String(error);
    } catch {
      text = String(error);
    }
  }
  const clean = redactSecrets(text);
  return clean.length > MAX_ERROR_LENGTH ? `${clean.slice(0, MAX_ERROR_LENGTH - 1)}…` : clean;
}
