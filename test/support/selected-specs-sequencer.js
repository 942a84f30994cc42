// Jest hands a global setup its configs but not the specs it selected. The sequencer sees them
// first: sort() gets the tests left after the path, project and shard filters, in the main
// process, before the global setup runs there. It leaves their paths on globalThis so the setup
// starts only what those specs need (test/support/selected-specs.ts reads them).
const Sequencer = require('@jest/test-sequencer').default;

class SelectedSpecsSequencer extends Sequencer {
  sort(tests) {
    globalThis.__outboxSelectedSpecs = tests.map((test) => test.path);
    return super.sort(tests);
  }
}

module.exports = SelectedSpecsSequencer;
