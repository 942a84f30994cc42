import { errorChain } from './kit/error-chain';
import { CONNECTION_LOST_CODES, UNREACHED_CODES } from './kit/socket-error-codes';

/**
 * What a failed kafkajs send means for the messages in it, decided from the kafkajs error classes
 * (`name`), the Kafka protocol error `type`, the `retriable` flag and socket error `code`s in the
 * error's cause chain, never from message text (which a broker or a proxy may word differently):
 * - `outage`: the cluster cannot be reached (connection refused or lost, request timed out,
 *   authentication failed); nothing is wrong with the messages.
 * - `unavailable`: some partitions are not serving (no leader, not enough in-sync replicas, or
 *   any other protocol error Kafka marks retriable that outlasted kafkajs' retries); possibly one
 *   topic only, still nothing wrong with the messages.
 * - `producer`: the producer's idempotence state is out of step with the broker; a new producer
 *   fixes it, the messages are fine.
 * - `topic`: one topic cannot take messages (unknown, invalid name, not authorised).
 * - `message`: a record batch was refused for its content (too large, invalid record).
 * - `other`: anything else.
 */
export type KafkaFailureKind =
  'outage' | 'unavailable' | 'producer' | 'topic' | 'message' | 'other';

const MESSAGE_TYPES = new Set([
  'MESSAGE_TOO_LARGE',
  'RECORD_LIST_TOO_LARGE',
  'INVALID_RECORD',
  'CORRUPT_MESSAGE',
  'INVALID_TIMESTAMP',
  'UNSUPPORTED_FOR_MESSAGE_FORMAT',
]);
const TOPIC_TYPES = new Set([
  'INVALID_TOPIC_EXCEPTION',
  'TOPIC_AUTHORIZATION_FAILED',
  'UNKNOWN_TOPIC_OR_PARTITION',
  'UNKNOWN_TOPIC_ID',
]);
const PRODUCER_TYPES = new Set([
  'OUT_OF_ORDER_SEQUENCE_NUMBER',
  'UNKNOWN_PRODUCER_ID',
  'INVALID_PRODUCER_EPOCH',
  'INVALID_PRODUCER_ID_MAPPING',
  'PRODUCER_FENCED',
]);
const UNAVAILABLE_TYPES = new Set([
  'LEADER_NOT_AVAILABLE',
  'NOT_LEADER_FOR_PARTITION',
  'NOT_LEADER_OR_FOLLOWER',
  'NOT_ENOUGH_REPLICAS',
  'NOT_ENOUGH_REPLICAS_AFTER_APPEND',
  'KAFKA_STORAGE_ERROR',
]);
const UNAVAILABLE_NAMES = new Set([
  'KafkaJSMetadataNotLoaded',
  'KafkaJSTopicMetadataNotLoaded',
  'KafkaJSStaleTopicMetadataAssignment',
]);
const OUTAGE_TYPES = new Set([
  'BROKER_NOT_AVAILABLE',
  'REQUEST_TIMED_OUT',
  'NETWORK_EXCEPTION',
  'NOT_CONTROLLER',
  'CLUSTER_AUTHORIZATION_FAILED',
  'SASL_AUTHENTICATION_FAILED',
  'ILLEGAL_SASL_STATE',
  'UNSUPPORTED_SASL_MECHANISM',
]);
const OUTAGE_NAMES = new Set([
  'KafkaJSConnectionError',
  'KafkaJSConnectionClosedError',
  'KafkaJSRequestTimeoutError',
  'KafkaJSBrokerNotFound',
  'KafkaJSNoBrokerAvailableError',
  'KafkaJSLockTimeout',
  'KafkaJSSASLAuthenticationError',
]);
const OUTAGE_CODES = new Set([...UNREACHED_CODES, ...CONNECTION_LOST_CODES]);

interface ErrorLike {
  name?: unknown;
  type?: unknown;
  code?: unknown;
  retriable?: unknown;
  cause?: unknown;
  originalError?: unknown;
}

/** The error and the errors it wraps (kafkajs nests the real one in `cause` once or twice). */
function chain(error: unknown): ErrorLike[] {
  return errorChain<ErrorLike>(error, (e) => e.cause ?? e.originalError);
}

/** The Kafka protocol error type (e.g. `MESSAGE_TOO_LARGE`) in an error's chain, if any. */
export function kafkaErrorType(error: unknown): string | undefined {
  for (const e of chain(error)) if (typeof e.type === 'string') return e.type;
  return undefined;
}

export function classifyKafkaError(error: unknown): KafkaFailureKind {
  const errors = chain(error);
  const types = errors.map((e) => e.type).filter((t): t is string => typeof t === 'string');
  const names = errors.map((e) => e.name).filter((n): n is string => typeof n === 'string');
  if (types.some((t) => MESSAGE_TYPES.has(t))) return 'message';
  if (types.some((t) => TOPIC_TYPES.has(t))) return 'topic';
  if (types.some((t) => PRODUCER_TYPES.has(t))) return 'producer';
  if (types.some((t) => UNAVAILABLE_TYPES.has(t)) || names.some((n) => UNAVAILABLE_NAMES.has(n)))
    return 'unavailable';
  if (
    types.some((t) => OUTAGE_TYPES.has(t)) ||
    names.some((n) => OUTAGE_NAMES.has(n)) ||
    errors.some((e) => typeof e.code === 'string' && OUTAGE_CODES.has(e.code))
  ) {
    return 'outage';
  }
  // A protocol error Kafka itself calls retriable (and kafkajs retried until it gave up): the
  // broker is not serving these partitions right now; it says nothing against the messages.
  if (errors.some((e) => e.name === 'KafkaJSProtocolError' && e.retriable === true))
    return 'unavailable';
  return 'other';
}

/** Failures that retrying the same message cannot fix. */
export function isPermanentKafkaError(error: unknown): boolean {
  const type = kafkaErrorType(error);
  return (
    type === 'MESSAGE_TOO_LARGE' ||
    type === 'RECORD_LIST_TOO_LARGE' ||
    type === 'INVALID_RECORD' ||
    type === 'INVALID_TOPIC_EXCEPTION'
  );
}
