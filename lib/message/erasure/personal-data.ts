/**
 * Personal data in a message (docs/erasure.md): the subject it belongs to, and which of the
 * payload's top-level fields hold it. Sealed at enqueue under the subject's data key, so that
 * `OutboxAdmin.erase(subject)` makes every copy unreadable by destroying that one key.
 */
export interface OutboxPersonalData {
  /**
   * Whose data it is: an opaque, stable id (a user id, not an e-mail address). Only its SHA-256
   * is stored, and only until the subject is erased.
   */
  readonly subject: string;
  /**
   * The payload's top-level fields that hold personal data; left out, the whole payload is
   * sealed. @default the whole payload
   */
  readonly fields?: readonly string[];
}

/** `personal` of `@OutboxEvent()`: the subject from the event, and the fields to seal. */
export interface OutboxEventPersonalData<TEvent = object> {
  /** The subject of an instance: a property name of the event, or a function of it. */
  readonly subject: (keyof TEvent & string) | ((event: TEvent) => string);
  /** The event's fields that hold personal data; left out, the whole payload. */
  readonly fields?: readonly (keyof TEvent & string)[];
}

/** What enqueue resolved of a message's personal data, carried on its row until it is sealed. */
export interface ResolvedPersonalData {
  readonly subject: string;
  /** null: the whole payload. */
  readonly fields: readonly string[] | null;
}
