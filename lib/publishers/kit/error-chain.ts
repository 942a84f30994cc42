/** The most links of a chain a classifier reads: a cause chain is a few deep, never a list. */
const MOST_LINKS = 8;

/**
 * An error and the errors it wraps, outermost first, each once and at most eight: what a
 * broker's classifier reads the fields of (`name`, `code`, a protocol's error type), since a
 * client often wraps the error that says what happened (a socket error in a connection error).
 * `wrapped` names the link to the next one: `cause` unless the client uses another field.
 */
export function errorChain<E extends object>(
  error: unknown,
  wrapped: (link: E) => unknown = (link) => (link as { cause?: unknown }).cause,
): E[] {
  const links: E[] = [];
  let current: unknown = error;
  while (
    typeof current === 'object' &&
    current !== null &&
    !links.includes(current as E) &&
    links.length < MOST_LINKS
  ) {
    const link = current as E;
    links.push(link);
    current = wrapped(link);
  }
  return links;
}
