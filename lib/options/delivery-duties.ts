/**
 * What the delivery mode asks of the parts beside the dispatcher's source: which workers run and
 * how, and what enqueue does. Decided once per instance by `planDelivery`
 * (lib/dispatch/delivery-source.provider.ts) and provided under `OUTBOX_DELIVERY_PLAN`; the
 * parts read these fields and never the mode itself. Here, below the workers and the service,
 * because they may not import the dispatcher's folder.
 */
export interface DeliveryDuties {
  /** Who delivers the table's messages, as admin, the console and `outbox why` report it. */
  readonly deliveredBy: 'dispatcher' | 'external';
  /**
   * Whether this instance's dispatcher publishes: a source that delivers and a publisher to
   * deliver through. Event policies it does not apply are worth a warning only then.
   */
  readonly publishes: boolean;
  /**
   * Whether the unlocker runs: rows here are leased by dispatchers, whose expired leases it
   * clears and whose orphans it promotes. Without them a promotion would only be an UPDATE that
   * the engine reading the log sees (Debezium's outbox router warns on every update).
   */
  readonly unlocks: boolean;
  /**
   * How the cleaner finds rows past retention: `'status'`, delivered and dead rows by their
   * policies' retention; `'age'`, every row older than `cleaner.deliveredRetentionMs`, where the
   * table never records a delivery.
   */
  readonly cleansBy: 'status' | 'age';
  /** Whether an enqueue NOTIFYs: only a polling dispatcher LISTENs. */
  readonly notifies: boolean;
  /**
   * Whether enqueue refuses what Debezium's outbox router would drop without a word: a binary
   * payload, broker attributes, a delivery time.
   */
  readonly jsonRowsOnly: boolean;
}
