import type { DeliveryDuties } from '../options/delivery-duties';
import type { ResolvedOutboxOptions } from '../options/resolve-outbox-options';
import type { OutboxLogObserver } from '../store/ports/outbox-log-source.port';
import type { DeliverySourceFactory } from './delivery-source';
import { LogPartitionSource } from './log/log-partition-source';
import { LogSource } from './log/log-source';
import { logSweepIntervalMs } from './log/open-log-source';
import { PartitionSource } from './partitions/partition-source';
import { PollSource, type PollSettings } from './poll/poll-source';
import { RowLeases } from './leases/row-leases';

/** The delivery mode's plan: the dispatcher's source, and what the other parts do. */
export interface DeliveryPlan extends DeliveryDuties {
  /** How this instance's dispatchers share the table (`dispatcher.claims`, or the table's choice). */
  readonly claims: 'leases' | 'partitions';
  /**
   * Makes the dispatcher's source from its pipeline; null where nothing is delivered here
   * (another engine reads the table), and the dispatcher then builds no pipeline and no publisher.
   */
  readonly source: DeliverySourceFactory | null;
}

/**
 * The one place the delivery mode is read: from the resolved `delivery`, once per instance, the
 * dispatcher's source and which workers run and how. `'external'` delivers nothing here: no
 * source, no unlocker, the cleaner by age; `'poll'` claims from the table (or its partitions);
 * a log observer reads new rows from the database's log, with the table's sweep beside it.
 */
export function planDelivery(
  options: ResolvedOutboxOptions,
  claims: 'leases' | 'partitions' = options.dispatcher.claims ?? 'leases',
): DeliveryPlan {
  const delivery = options.delivery;
  if (delivery === 'external') {
    return {
      claims,
      source: null,
      deliveredBy: 'external',
      publishes: false,
      unlocks: false,
      cleansBy: 'age',
      notifies: false,
      jsonRowsOnly: true,
    };
  }
  const duties = {
    claims,
    deliveredBy: 'dispatcher',
    publishes: options.publisher !== undefined,
    unlocks: true,
    cleansBy: 'status',
    jsonRowsOnly: false,
  } as const;
  if (delivery === 'poll') {
    // Only a polling dispatcher LISTENs: a log source reads new rows from the log, so a NOTIFY
    // would wake no one.
    const rowLeases = claims === 'leases';
    return {
      ...duties,
      // Delivery partitions lease no row: the owners promote orphans themselves, and expired
      // leases (a deaf call's at shutdown) are read past as free.
      unlocks: rowLeases,
      notifies: options.dispatcher.listen,
      source: pollSource(options, claims),
    };
  }
  if (claims === 'partitions') {
    // The log's reader owns every partition: no row lease, so no unlocker (as polling them).
    return {
      ...duties,
      unlocks: false,
      notifies: false,
      source: (pipeline, context) =>
        new LogPartitionSource(
          delivery,
          context,
          (feed) => new PartitionSource(pipeline, context, feed),
        ),
    };
  }
  return { ...duties, notifies: false, source: logSource(delivery) };
}

function pollSource(
  options: ResolvedOutboxOptions,
  claims: 'leases' | 'partitions',
): DeliverySourceFactory {
  if (claims === 'partitions') {
    return (pipeline, context) => new PartitionSource(pipeline, context);
  }
  const { pollIntervalMs, listen } = options.dispatcher;
  return (pipeline, context) =>
    new PollSource(pipeline, context, new RowLeases(pipeline, context), {
      intervalMs: pollIntervalMs,
      listen,
      commitNudges: true,
      claimAtStart: true,
    });
}

// The log brings new messages; the table's poll, slower, brings back retries, promotions and
// what the log's reader left to the table. Commit nudges and NOTIFY would only make the poll
// race the reader for every new message: both correct, the poll a wasted claim. The first
// sweep comes after one interval: what committed before the slot existed (a backlog from
// polling days) waits that long; everything since is in the log.
function logSource(observer: OutboxLogObserver): DeliverySourceFactory {
  const sweep: PollSettings = {
    intervalMs: logSweepIntervalMs(observer),
    listen: false,
    commitNudges: false,
    claimAtStart: false,
  };
  // The reader's leases by id and the sweep's claims share one owner lock and one list of
  // leases whose answer was lost.
  return (pipeline, context) => {
    const leases = new RowLeases(pipeline, context);
    return new LogSource(
      observer,
      pipeline,
      context,
      leases,
      new PollSource(pipeline, context, leases, sweep),
    );
  };
}
