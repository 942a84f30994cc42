import type { DataSource } from 'typeorm';

// TypeORM runs every SQLite transaction of a DataSource on one shared connection, and a
// transaction started while another is open becomes a SAVEPOINT inside it: a duplicate would see
// the first delivery's uncommitted row, and one handler's rollback would undo the other's
// committed-looking work. The inbox therefore runs its own SQLite transactions one at a time per
// DataSource. Keyed weakly by the DataSource, so separate apps in one process never share a queue.
const tails = new WeakMap<DataSource, Promise<void>>();

/** Runs `work` after every earlier piece of work queued on the same DataSource has settled. */
export function runSerially<T>(dataSource: DataSource, work: () => Promise<T>): Promise<T> {
  const previous = tails.get(dataSource) ?? Promise.resolve();
  const result = previous.then(work);
  tails.set(
    dataSource,
    result.then(
      () => undefined,
      () => undefined,
    ),
  );
  return result;
}
