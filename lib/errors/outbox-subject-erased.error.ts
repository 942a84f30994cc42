import { OutboxError } from './outbox.error';

/**
 * The message's personal data belongs to a subject that was erased (`OutboxAdmin.erase`): its
 * data key is destroyed, so nothing of it can be read again (docs/erasure.md). A consumer drops
 * the message's personal data, and its own copies of it, rather than retry.
 */
export class OutboxSubjectErasedError extends OutboxError {
  constructor(
    /** The destroyed data key's id (`x-outbox-subject-key`). */
    readonly keyId: string,
    /** When the key was destroyed; null where the database did not say. */
    readonly erasedAt: Date | null,
  ) {
    super(
      `The personal data of this message was erased: its data key ${keyId} was destroyed` +
        `${erasedAt === null ? '' : ` at ${erasedAt.toISOString()}`} (docs/erasure.md). Drop it; do not retry.`,
    );
  }
}
