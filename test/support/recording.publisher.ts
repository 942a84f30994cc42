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

/**
 * Holds the first publish call that carries a message of `key` at the broker until `release()`:
 * a batch in flight, for the tests of what goes beside it.
 */
export function holdFirstCallOf(
  publisher: RecordingPublisher,
  key: string,
): { readonly holding: () => boolean; readonly release: () => void } {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let holding = false;
  const publish = publisher.publish.bind(publisher);
  publisher.publish = async (messages, signal) => {
    if (!holding && messages.some((m) => m.key === key)) {
      holding = true;
      await gate;
    }
    return publish(messages, signal);
  };
  return { holding: () => holding, release };
}
