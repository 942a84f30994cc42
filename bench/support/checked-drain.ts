/** A backlog seeded, drained by the module into a RabbitMQ queue, and checked at the consumer. */
import type { DataSource } from 'typeorm';
import { analyse, seedOutbox, truncateOutbox } from './databases';
import { drainAll, measured, type OutboxApp } from './outbox-app';
import { purgeQueue, readAndCheck, type Rabbit } from './rabbit';

export interface CheckedDrain {
  readonly msgsPerS: number;
  /** Duplicates + per-key order violations + missing messages at the consumer. */
  readonly problems: number;
}

/**
 * Seeds `n` messages into the emptied `table`, drains them with `app` (repeated when an outage
 * hit the run, see `measured`) and reads them back from `queue`.
 */
export async function checkedRabbitDrain(options: {
  readonly label: string;
  readonly log: (line: string) => void;
  readonly app: OutboxApp;
  readonly ds: DataSource;
  readonly table: string;
  readonly rabbit: Rabbit;
  readonly queue: string;
  readonly n: number;
  /** Distinct keys the messages cycle through. @default the seeding's default (1 000) */
  readonly keys?: number;
}): Promise<CheckedDrain> {
  const { app, ds, table, rabbit, queue, n } = options;
  const msgsPerS = await measured(
    options.label,
    options.log,
    async () => {
      await truncateOutbox(ds, table);
      await seedOutbox(ds, table, n, options.keys === undefined ? {} : { keys: options.keys });
      await analyse(ds, table);
      await purgeQueue(rabbit, queue);
      const start = performance.now();
      await drainAll(app, ds, table);
      return n / ((performance.now() - start) / 1000);
    },
    [app],
  );
  const check = await readAndCheck(queue, n);
  return { msgsPerS, problems: check.duplicates + check.orderViolations + check.missing };
}
