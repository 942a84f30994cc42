import { errorChain } from '../kit/error-chain';
import { CONNECTION_LOST_CODES, UNREACHED_CODES } from '../kit/socket-error-codes';

/**
 * What a failed AWS SDK call (SQS `SendMessageBatch`, SNS `PublishBatch`) means for the messages
 * in it, decided from the error's `name`, its `$fault`, its HTTP status and socket error codes in
 * its cause chain, never from message text. Typed structurally: no AWS package is loaded.
 * - `unsent`: the request never reached AWS (connection refused, host unknown): an outage, and
 *   the messages were certainly not taken.
 * - `outage`: AWS cannot take messages now (connection lost, request timed out, throttled, a
 *   server-side fault): nothing is wrong with the messages.
 * - `credentials`: the credentials or permissions are refused; an operator has to act, and
 *   nothing is wrong with the messages either.
 * - `destination`: the queue or topic does not exist.
 * - `request`: the request was refused for its content (an invalid attribute or character, too
 *   long): some message in it cannot be sent as it is.
 * - `aborted`: the call was aborted (the publish deadline passed): AWS may have the messages.
 * - `other`: anything else.
 */
export type AwsFailureKind =
  'unsent' | 'outage' | 'credentials' | 'destination' | 'request' | 'aborted' | 'other';

const OUTAGE_CODES = new Set([...CONNECTION_LOST_CODES, 'ECONNABORTED', 'ESOCKETTIMEDOUT']);
const OUTAGE_NAMES = new Set([
  'TimeoutError',
  'RequestTimeout',
  'RequestTimeoutException',
  'Throttling',
  'ThrottlingException',
  'ThrottledException',
  'RequestThrottled',
  'RequestThrottledException',
  'TooManyRequestsException',
  'RequestLimitExceeded',
  'ServiceUnavailable',
  'ServiceUnavailableException',
  'InternalError',
  'InternalFailure',
  'InternalErrorException',
  'KmsThrottled',
  'KMSThrottlingException',
  'QueueDeletedRecently',
]);
const CREDENTIAL_NAMES = new Set([
  'CredentialsProviderError',
  'InvalidClientTokenId',
  'UnrecognizedClientException',
  'SignatureDoesNotMatch',
  'IncompleteSignature',
  'MissingAuthenticationToken',
  'InvalidSecurity',
  'ExpiredToken',
  'ExpiredTokenException',
  'AccessDenied',
  'AccessDeniedException',
  'AuthorizationError',
  'AuthorizationErrorException',
  'KmsAccessDenied',
  'KMSAccessDeniedException',
  'KmsDisabled',
  'KMSDisabledException',
  'OptInRequired',
]);
const DESTINATION_NAMES = new Set([
  'QueueDoesNotExist',
  'AWS.SimpleQueueService.NonExistentQueue',
  'NonExistentQueue',
  'NotFound',
  'NotFoundException',
]);
const REQUEST_NAMES = new Set([
  'InvalidParameterValue',
  'InvalidParameterValueException',
  'InvalidParameter',
  'InvalidParameterException',
  'InvalidMessageContents',
  'InvalidAttributeName',
  'InvalidAttributeValue',
  'InvalidBatchEntryId',
  'BatchRequestTooLong',
  'AWS.SimpleQueueService.BatchRequestTooLong',
  'BatchRequestTooLongException',
  'TooManyEntriesInBatchRequest',
  'AWS.SimpleQueueService.TooManyEntriesInBatchRequest',
  'TooManyEntriesInBatchRequestException',
  'BatchEntryIdsNotDistinct',
  'BatchEntryIdsNotDistinctException',
  'ValidationError',
  'ValidationException',
  'UnsupportedOperation',
  'InvalidQueryParameter',
  'MissingParameter',
  'InvalidParameterCombination',
]);

interface ErrorLike {
  name?: unknown;
  code?: unknown;
  Code?: unknown;
  $fault?: unknown;
  $metadata?: { httpStatusCode?: unknown };
  $retryable?: { throttling?: unknown };
  cause?: unknown;
}

// The SDK's retry middleware turns a thrown value that is not an Error of its own realm (a
// socket error under jest, or in any vm context) into `new Error('AWS SDK error wrapper for ' +
// String(value))`, keeping only that text: "<name>: <message>", a socket error's message ending
// in its code ("read ECONNRESET", "connect ECONNREFUSED 127.0.0.1:9324"). Only that fixed format
// is read back.
const SDK_WRAPPER = /^AWS SDK error wrapper for ([A-Za-z.]+): (?:\w+ )?(E[A-Z]+)?/;

function unwrapped(error: ErrorLike & { message?: unknown }): ErrorLike | undefined {
  if (typeof error.message !== 'string') return undefined;
  const match = SDK_WRAPPER.exec(error.message);
  if (match === null) return undefined;
  return { name: match[1], code: match[2] };
}

/** The error's chain, each link followed by what the SDK's text wrapper of it says, if it is one. */
function chain(error: unknown): ErrorLike[] {
  return errorChain<ErrorLike>(error).flatMap((link) => {
    const wrapped = unwrapped(link);
    return wrapped === undefined ? [link] : [link, wrapped];
  });
}

/** The AWS error names of an error and its causes (`name`, and the query protocol's `Code`). */
function names(errors: readonly ErrorLike[]): string[] {
  return errors.flatMap((e) =>
    [e.name, e.Code].filter((n): n is string => typeof n === 'string' && n !== ''),
  );
}

export function classifyAwsError(error: unknown): AwsFailureKind {
  const errors = chain(error);
  const named = names(errors);
  const codes = errors.map((e) => e.code).filter((c): c is string => typeof c === 'string');
  if (named.includes('AbortError')) return 'aborted';
  if (codes.some((c) => UNREACHED_CODES.has(c))) return 'unsent';
  if (named.some((n) => CREDENTIAL_NAMES.has(n))) return 'credentials';
  if (named.some((n) => DESTINATION_NAMES.has(n))) return 'destination';
  if (named.some((n) => REQUEST_NAMES.has(n))) return 'request';
  if (
    named.some((n) => OUTAGE_NAMES.has(n)) ||
    codes.some((c) => OUTAGE_CODES.has(c)) ||
    errors.some((e) => e.$fault === 'server' || e.$retryable?.throttling === true)
  ) {
    return 'outage';
  }
  const status = errors
    .map((e) => e.$metadata?.httpStatusCode)
    .find((s): s is number => typeof s === 'number');
  if (status !== undefined && status >= 500) return 'outage';
  if (status === 403) return 'credentials';
  // A client-side fault of the SDK's own (no HTTP status): e.g. a response it could not read.
  return 'other';
}

/** An entry the batch API refused, as `SendMessageBatch` and `PublishBatch` report it. */
export interface AwsBatchEntryFailure {
  readonly Id?: string;
  readonly Code?: string;
  readonly Message?: string;
  readonly SenderFault?: boolean;
}

/**
 * Whether retrying the same entry cannot help: the sender's fault (an invalid entry), except
 * where the code says AWS could not take it for now (throttling, a KMS key being throttled).
 */
export function isPermanentEntryFailure(failure: AwsBatchEntryFailure): boolean {
  if (failure.SenderFault !== true) return false;
  const code = failure.Code ?? '';
  return !OUTAGE_NAMES.has(code) && !/thrott/i.test(code);
}
