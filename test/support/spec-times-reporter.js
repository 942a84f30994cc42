// OUTBOX_TEST_TIMES_OUT=<file> (scripts/test.sh sets it when OUTBOX_TEST_RECORD_TIMES=1): each
// spec file's time in this process, one JSON line per run of it, keyed by its project and path
// (`sources test/dispatch/ordering.spec.ts`): the opt-in projects run the same promise specs in
// other modes, where one spec takes twice as long as in another, so a time per path alone left
// the shards of a run unequal by minutes.
const { appendFileSync } = require('node:fs');
const { relative } = require('node:path');

class SpecTimesReporter {
  constructor(globalConfig) {
    this.rootDir = globalConfig.rootDir;
  }

  onTestResult(test, result) {
    const file = process.env.OUTBOX_TEST_TIMES_OUT;
    if (!file || result.perfStats === undefined) return;
    const project = test.context.config.displayName?.name ?? '';
    const key = `${project} ${relative(this.rootDir, test.path)}`;
    const seconds = (result.perfStats.end - result.perfStats.start) / 1000;
    appendFileSync(file, `${JSON.stringify({ key, seconds })}\n`);
  }
}

module.exports = SpecTimesReporter;
