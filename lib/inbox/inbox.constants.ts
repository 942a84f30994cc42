/** The inbox table's name unless `tableName` says otherwise. */
export const INBOX_DEFAULT_TABLE = 'inbox';

/** Longest message id the inbox records, in UTF-8 bytes (the key column's size). */
export const INBOX_MAX_MESSAGE_ID_BYTES = 255;
/** Longest consumer name, in UTF-8 bytes (the key column's size). */
export const INBOX_MAX_CONSUMER_BYTES = 128;
