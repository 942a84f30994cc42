import { RecordingPublisher as PublicRecordingPublisher } from '../../lib/testing';

export type {
  RecordingFailure as FailureKind,
  RecordingMatcher as MessageMatcher,
} from '../../lib/testing';

/**
 * The public `RecordingPublisher` of `nestjs-outbox/testing`, with the names the dispatcher
 * suites were written with. A double for functional dispatcher tests only; delivery proofs use
 * a real transport.
 */
export class RecordingPublisher extends PublicRecordingPublisher {
  /** Messages acknowledged as published, in publication order (duplicates included). */
  get sent() {
    return this.messages;
  }

  get sentIds(): string[] {
    return this.messageIds;
  }

  /** Message ids published for one key, in publication order. */
  sentForKey(key: string | null): string[] {
    return this.messagesFor({ key }).map((r) => r.messageId);
  }
}
