import { OutboxError } from '../../errors/outbox.error';

/**
 * Why Redis did not add a message's entry, when it answered without an error:
 * - `no-stream`: the stream does not exist and the publisher runs with `createStreams: false`
 *   (`XADD … NOMKSTREAM` answered nil).
 */
export type RedisStreamsFailure = 'no-stream';

/** A message's entry was not added to its stream; the message is retried, then dead-lettered. */
export class RedisStreamsPublishError extends OutboxError {
  constructor(
    message: string,
    readonly reason: RedisStreamsFailure,
    /** The stream key of the entry. */
    readonly stream: string,
  ) {
    super(message);
  }
}
