/**
 * Something a source runs beside the pipeline that the holds of its batches lean on (the row
 * leases' owner lock and takeover look): started with the pipeline, and given up at shutdown only
 * once no batch publishing leans on it.
 */
export interface PipelineWorker {
  start(): Promise<void>;
  /** The stop began: stop looking for new work, keep what running batches lean on. */
  stopWatching(): void;
  /** Gives up what it holds; called once no batch leans on it. */
  stop(): Promise<void>;
}
