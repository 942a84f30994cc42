// eslint-disable-next-line no-control-regex
const UNSAFE = /[\s\u0000-\u001f\u007f*>]|\p{Cs}/u;
/** NATS itself has no subject limit short of its control line (4 KiB); this one keeps logs sane. */
export const MAX_NATS_SUBJECT_BYTES = 1_024;
/**
 * First tokens of the server's own subjects: the JetStream API (`$JS.API.STREAM.DELETE…`, also
 * under a domain as `$JS.<domain>.API…`), its cluster and system traffic. A message published
 * there would be an API call, not a message.
 */
const SYSTEM_TOKENS = new Set(['$JS', '$JSC', '$SYS', '$NRG']);

/**
 * Why `subject` cannot be published to by the outbox, or undefined when it can: dot-separated
 * non-empty tokens without whitespace, control characters or wildcards (`*`, `>`), at most
 * 1 024 UTF-8 bytes, and none of the server's own subjects.
 */
export function natsSubjectProblem(subject: unknown): string | undefined {
  if (typeof subject !== 'string' || subject === '') return 'expected a non-empty string';
  if (UNSAFE.test(subject))
    return 'a NATS subject to publish to has no whitespace, control characters or wildcards (* >)';
  if (Buffer.byteLength(subject, 'utf8') > MAX_NATS_SUBJECT_BYTES)
    return `it is longer than ${MAX_NATS_SUBJECT_BYTES} UTF-8 bytes`;
  const tokens = subject.split('.');
  if (tokens.includes(''))
    return 'its tokens must not be empty (no leading, trailing or double dot)';
  if (SYSTEM_TOKENS.has(tokens[0] ?? '')) return `"${tokens[0]}." subjects are the server's own`;
  return undefined;
}
