import { MAX_ERROR_LENGTH } from '../store/outbox-row.mapper';
import { redactSecrets } from './redact-secrets';

// Re-exported because the publishers import the redactor from here, next to describeError.
export { redactSecrets };

function rawText(error: unknown): string {
  if (error instanceof Error) {
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
