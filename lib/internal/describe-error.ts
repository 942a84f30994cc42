import { redactSecrets } from './redact-secrets';

/** Error texts are stored truncated: enough to diagnose, never a whole stack or payload. */
export const MAX_ERROR_LENGTH = 2_000;

// Re-exported because the publishers import the redactor from here, next to describeError.
export { redactSecrets };

/**
 * An Error, or an error from another realm (`instanceof Error` fails there): better-sqlite3's
 * native binding creates its SqliteError once per process, so under a test runner that gives
 * each file its own realm, or in a vm context, its errors are not instances of this Error.
 */
function isErrorLike(error: unknown): error is Error {
  if (error instanceof Error) return true;
  if (error === null || typeof error !== 'object') return false;
  const { message, name } = error as { message?: unknown; name?: unknown };
  return typeof message === 'string' && typeof name === 'string';
}

function rawText(error: unknown): string {
  if (isErrorLike(error)) {
    let text = error.message === '' ? error.name : `${error.name}: ${error.message}`;
    // node-postgres and net report a failed connect to several addresses as an AggregateError
    // with an empty message: the reasons are in its errors.
    if (error instanceof AggregateError && error.errors.length > 0) {
      text += ` (${error.errors.map(rawText).join('; ')})`;
    }
    return text;
  }
  if (typeof error === 'string') return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}

/** A short, credential-free description of an error, for logs and `last_error`. */
export function describeError(error: unknown): string {
  const clean = redactSecrets(rawText(error));
  return clean.length > MAX_ERROR_LENGTH ? `${clean.slice(0, MAX_ERROR_LENGTH - 1)}…` : clean;
}

/** Longest error class stored in the attempt history. */
export const MAX_ERROR_CLASS_LENGTH = 128;

/**
 * The class of an error as the attempt history records it: its `name` (`PublishTimeoutError`,
 * `PermanentPublishError`, a broker client's own), or the JavaScript type of a thrown non-error.
 */
export function errorClassOf(error: unknown): string {
  const name = isErrorLike(error) ? error.name : error === null ? 'null' : typeof error;
  const clean = redactSecrets(name === '' ? 'Error' : name);
  return clean.length > MAX_ERROR_CLASS_LENGTH ? clean.slice(0, MAX_ERROR_CLASS_LENGTH) : clean;
}
