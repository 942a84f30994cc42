/**
 * How many due rows a claim looks at to find `limit` heads of their keys: room for followers
 * not parked yet, without growing with a stuck key's backlog (those get parked).
 */
export function claimWindow(limit: number): number {
  return limit * 2 + 50;
}
