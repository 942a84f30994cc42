// Jest hands a global setup its configs but not the specs it selected. The sequencer sees them
// first: sort() gets the tests left after the path, project and shard filters, in the main
// process, before the global setup runs there. It leaves their paths on globalThis so the setup
// starts only what those specs need (test/support/selected-specs.ts reads them).
const { readFileSync, statSync } = require('node:fs');
const { join, relative } = require('node:path');
const Sequencer = require('@jest/test-sequencer').default;

/** Seconds per spec, keyed by its project and its path from the root (`integration test/…`), as scripts/test.sh records them. */
function recordedTimes() {
  try {
    return JSON.parse(readFileSync(join(__dirname, 'spec-times.json'), 'utf8'));
  } catch {
    return {};
  }
}

/** Each spec's recorded seconds, or its size times the recorded specs' median seconds per byte. */
function recordedOrSized(tests) {
  const recorded = recordedTimes();
  const root = join(__dirname, '..', '..');
  const seconds = tests.map(
    (test) =>
      recorded[`${test.context.config.displayName?.name ?? ''} ${relative(root, test.path)}`],
  );
  const sizes = tests.map((test) => statSync(test.path).size);
  const rates = seconds
    .map((t, i) => (typeof t === 'number' ? t / sizes[i] : undefined))
    .filter((r) => r !== undefined)
    .sort((a, b) => a - b);
  const perByte = rates.length > 0 ? rates[Math.floor(rates.length / 2)] : 1;
  return seconds.map((t, i) => (typeof t === 'number' && t > 0 ? t : sizes[i] * perByte));
}

/**
 * A spec that disturbs a service every other spec shares (it stops the broker, or sets off its
 * memory alarm) says so with `@runs-alone` in a comment: scripts/test.sh leaves it out of the
 * processes that run side by side (OUTBOX_TEST_ALONE=skip) and runs it after them, by itself
 * (OUTBOX_TEST_ALONE=only).
 */
function runsAlone(test) {
  return /@runs-alone\b/.test(readFileSync(test.path, 'utf8'));
}

class SelectedSpecsSequencer extends Sequencer {
  sort(tests) {
    globalThis.__outboxSelectedSpecs = tests.map((test) => test.path);
    return super.sort(tests);
  }

  // `--shard=i/n` (scripts/test.sh runs the shards side by side, each in band): shares of about
  // the same length, not of the same count, since one spec takes seconds and another minutes.
  // Longest first, each to the shard with the least so far. A spec's length is its time in the
  // last run when jest recorded one for every spec (its cache, which a fresh clone lacks), else
  // its time in its project recorded in test/support/spec-times.json (OUTBOX_TEST_RECORD_TIMES=1,
  // scripts/test.sh), else its size, scaled by the recorded specs' seconds per byte. scripts/test.sh checks that the shards ran every
  // selected spec once.
  shard(all, { shardIndex, shardCount }) {
    const alone = process.env.OUTBOX_TEST_ALONE;
    if (alone === 'only') return all.filter(runsAlone);
    const tests = alone === 'skip' ? all.filter((test) => !runsAlone(test)) : all;
    const timed = tests.map((test) => this._getCache(test)[test.path]?.[1]);
    const weights = timed.every((t) => typeof t === 'number' && t > 0)
      ? timed
      : recordedOrSized(tests);
    const order = tests
      .map((test, i) => ({
        test,
        weight: weights[i],
        key: `${test.context.config.displayName?.name ?? ''} ${test.path}`,
      }))
      .sort((a, b) => b.weight - a.weight || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    const loads = new Array(shardCount).fill(0);
    const mine = [];
    for (const { test, weight } of order) {
      const least = loads.indexOf(Math.min(...loads));
      loads[least] += weight;
      if (least === shardIndex - 1) mine.push(test);
    }
    return mine;
  }
}

module.exports = SelectedSpecsSequencer;
