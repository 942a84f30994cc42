const UUID_HEX = /^[0-9a-f]{32}$/i;
const UUID_TEXT = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * One spelling per UUID, so one message is one id whoever carried it. The module's publishers
 * send the id as lowercase UUID text; Debezium's router on a MySQL/MariaDB table, whose
 * `message_id` is `BINARY(16)`, sends the same id as 32 hex digits (`binary.handling.mode=hex`).
 * A message re-sent across a cut-over between the two would otherwise be two ids to the inbox and
 * be handled twice. Both forms, in either case, become lowercase UUID text; any other id is kept
 * as it is, byte for byte.
 */
export function canonicalMessageId(id: string): string {
  if (UUID_TEXT.test(id)) return id.toLowerCase();
  if (!UUID_HEX.test(id)) return id;
  const hex = id.toLowerCase();
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
