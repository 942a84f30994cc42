import { createHash } from 'node:crypto';
import type { OutboxHeaders } from '../../message/outbox-message.interface';
import { REDRIVE_LANE_PREFIX } from '../../outbox.constants';
import type { ClaimedRecord } from '../ports/outbox-store.port';
import type { SqlParams } from '../shared-sql/sql-params';

/**
 * Re-drive lanes (ARCHITECTURE.md, "Re-drive lanes"). A copy that a re-drive sends to another
 * destination must not queue in its key's lane: a rate's copies wait in the table for their due
 * times, and every claim, park and lease by id orders a key's rows by `message_key`, so they
 * would hold the key's live messages until the last of them had gone. Such a copy is stored
 * with a lane of its own in `message_key`, one per destination and key, and its key in a stored
 * header; every statement that orders messages then orders one destination's copies of a key
 * among themselves only, and what leaves the table (the record handed to publishers, the admin
 * views) shows the key. The lane is made of digests: a key and a topic may each be as long as
 * their column.
 *
 * Builds before per-destination lanes stored every copy of a key in one lane, the key's digest
 * alone (`keyLaneOf`). Each per-destination lane begins with that lane and a colon, so one
 * lookup by key finds both, and a copy written now joins the old lane while that lane still
 * holds undelivered copies to its destination (see `OutboxRedriver`), so an upgrade in the
 * middle of a paced re-drive reorders nothing.
 */

/** The stored header that keeps a lane copy's key; never handed on (see `shownKeyOf`). */
export const REDRIVE_LANE_KEY_HEADER = 'x-outbox-redrive-key';

/** Hex digits of the destination's digest in a lane: 128 bits. */
const DESTINATION_DIGITS = 32;

const digest = (text: string): string => createHash('sha256').update(text).digest('hex');

/**
 * The lane every copy of `key` sent elsewhere shared in builds before per-destination lanes; the
 * start of each of the key's per-destination lanes now.
 */
export function keyLaneOf(key: string): string {
  return `${REDRIVE_LANE_PREFIX}${digest(`nestjs-outbox:redrive-lane:${key}`)}`;
}

/** The lane of `key`'s copies sent to `destination`, another topic than their original's. */
export function redriveLaneOf(destination: string, key: string): string {
  const topic = digest(`nestjs-outbox:redrive-destination:${destination}`);
  return `${keyLaneOf(key)}:${topic.slice(0, DESTINATION_DIGITS)}`;
}

/**
 * The lane of `key`'s gap-repair copies on `topic` (docs/gap-repair.md): apart from the key's
 * live messages, so that a copy asked for by a consumer holding a later message goes out at
 * once rather than behind what the key still has queued, and ordered among the key's other
 * repair copies to that topic. It begins as every lane of the key does, so lookups by key find it.
 */
export function repairLaneOf(topic: string, key: string): string {
  const digestOfTopic = digest(`nestjs-outbox:gap-repair:${topic}`);
  return `${keyLaneOf(key)}:${digestOfTopic.slice(0, DESTINATION_DIGITS)}`;
}

/**
 * How a lookup by `key` matches its stored rows: the key's own `message_key`, the lane of older
 * builds, and (a LIKE pattern, free of wildcards but its last `%`) every per-destination lane.
 */
export function storedKeysOf(key: string): {
  readonly exact: [string, string];
  readonly lanes: string;
} {
  const lane = keyLaneOf(key);
  return { exact: [key, lane], lanes: `${lane}:%` };
}

/**
 * The condition over the alias `o` that finds `key`'s rows, its re-drive copies in lanes
 * included, its values bound through `p`.
 */
export function storedKeyCondition(p: SqlParams, key: string): string {
  const { exact, lanes } = storedKeysOf(key);
  return `(o.message_key IN (${exact.map((k) => p.add(k)).join(', ')}) OR o.message_key LIKE ${p.add(lanes)})`;
}

/** Whether a stored `message_key` is a re-drive lane rather than a key. */
export function isRedriveLane(stored: string | null): stored is string {
  return stored !== null && stored.startsWith(REDRIVE_LANE_PREFIX);
}

/**
 * A stored row's key as users see it, and its headers without the lane's: the row's
 * `message_key` unless that is a lane. Called only for lanes on hot paths (`isRedriveLane`).
 */
export function shownKeyOf(
  stored: string,
  headers: OutboxHeaders,
): { key: string; headers: OutboxHeaders } {
  const { [REDRIVE_LANE_KEY_HEADER]: key, ...rest } = headers;
  // A lane row always has the header (the re-drive writes both at once); the lane itself is the
  // only truthful answer if a hand-edited row lost it.
  return { key: key ?? stored, headers: rest };
}

/** The lane a claimed record is ordered in: its key, or a re-drive copy's lane of its own. */
export function laneOf(record: ClaimedRecord): string | null {
  return record.lane ?? record.key;
}
