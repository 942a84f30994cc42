/**
 * How many partitions the key space is cut into (schema step 9). Fixed: a row's partition is
 * stored, and the owners table has one row per partition. 256 is many more than the dispatchers
 * of one table, so partitions spread evenly as instances come and go, and few enough that an
 * instance's set is one small array.
 */
export const DELIVERY_PARTITIONS = 256;

/** Every partition number, in order. */
export const ALL_PARTITIONS: readonly number[] = Array.from(
  { length: DELIVERY_PARTITIONS },
  (_, p) => p,
);

/**
 * The payload of the NOTIFY, on the table's wake-up channel, that says the partitions' shares
 * changed (a process joined, handed partitions over, or left): the listeners beat at once
 * rather than at their next beat. Writers' wake-ups carry none.
 */
export const MEMBERS_NOTICE = 'outbox:members';
