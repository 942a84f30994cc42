import { readFileSync } from 'node:fs';

/**
 * The spec files of this run, as the project's sequencer recorded them
 * (selected-specs-sequencer.js); undefined when another sequencer ran.
 */
function selectedSpecs(): readonly string[] | undefined {
  return (globalThis as { __outboxSelectedSpecs?: readonly string[] }).__outboxSelectedSpecs;
}

/**
 * Whether the run includes a spec that needs Kafka: one whose source names it (its describeWith
 * lists, its clients, its broker settings). Reading the source rather than keeping a list means a
 * new Kafka spec needs no registration. Matching too much only starts a broker for nothing; a
 * spec this misses is failed under CI=true by describeWith ("kafka was not probed"), not skipped.
 * With no record of the selection (another sequencer), every run is taken to need it.
 */
export function selectedSpecsNeedKafka(): boolean {
  return selectedSpecsMention(/kafka/i);
}

/** Whether the run includes a spec that needs ElasticMQ (an SQS server): as for Kafka. */
export function selectedSpecsNeedElasticMq(): boolean {
  return selectedSpecsMention(/elasticmq/i);
}

function selectedSpecsMention(pattern: RegExp): boolean {
  const specs = selectedSpecs();
  if (specs === undefined) return true;
  return specs.some((path) => pattern.test(readFileSync(path, 'utf8')));
}
