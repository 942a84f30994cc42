// Node's socket and DNS error codes (`error.code`), by what they say about a request: the codes
// every broker client passes on from the socket under it, read by each publisher's classifier.

/** The request never reached the server (refused, no such host, no route): nothing was sent. */
export const UNREACHED_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/** The connection was lost or timed out under the request: the server may have it. */
export const CONNECTION_LOST_CODES: ReadonlySet<string> = new Set([
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
]);
