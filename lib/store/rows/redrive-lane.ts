import { createHash } from 'node:crypto';
import type { OutboxHeaders } from '../../message/outbox-message.interface';
import { REDRIVE_LANE_PREFIX } from '../../outbox.constants';
import type { ClaimedRecord } from '../ports/outbox-store.port';

/**
 * Re-drive lanes (ARCHITECTURE.md, "Re-drive lanes"). A copy that a re-drive sends to another
 * destination must not queue in its key's lane: a rate's copies wait in the table for their due
 * times, and every claim, park and lease by id orders a key's rows by `message_key`, so they
 * would hold the key's live messages until the last of them had gone. Such a copy is stored
 * with a lane of its own in `message_key`, the same for every copy of one key, and its key in a
 * stored header; every statement that orders messages then orders the copies among themselves
 * only, and what leaves the table (the record handed to publishers, the admin views) shows the
 * key. The lane is a digest: a key may be as long as the column.
 */

/** The stored header that keeps a lane copy's key; never handed on (see `shownKeyOf`). */
export const REDRIVE_LANE_KEY_HEADER = 'x-outbox-redrive-key';

/** The lane of `key`'s copies sent to another destination than their original's. */
export function redriveLaneOf(key: string): string {
  const digest = createHash('sha256').update(`nestjs-outbox:redrive-lane:${key}`).digest('hex');
  return `${REDRIVE_LANE_PREFIX}${digest}`;
}

/** Whether a stored `message_key` is a re-drive lane rather than a key. */
export function isRedriveLane(stored: string | null): stored is string {
  return stored !== null && stored.startsWith(REDRIVE_LANE_PREFIX);
}

/** The stored `message_key` values a lookup by `key` matches: the key's own, and its lane. */
export function storedKeysOf(key: string): [string, string] {
  return [key, redriveLaneOf(key)];
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
