#!/usr/bin/env bash
# npm test and the opt-in projects' runs: jest in two processes side by side, each running its
# share of the selected specs in band (the split: shard() in test/support/selected-specs-sequencer.js).
# Most of a spec's time is spent waiting on a database, a broker or a timer, so two of them
# overlap well on two cores; each process keeps its own global setup and its own global teardown,
# which fails the run on any socket or timer a spec of that process left open (--runInBand keeps
# every spec in the process that checks).
#
#   bash scripts/test.sh [jest arguments]     e.g. a path, -t 'name', --selectProjects heavy
#
# OUTBOX_TEST_SHARDS: how many processes (default 2; 1 runs plain `jest --runInBand`). A run that
# selects a single spec runs in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
shards=${OUTBOX_TEST_SHARDS:-2}
jest=(node node_modules/jest/bin/jest.js)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"${jest[@]}" --listTests "$@" 2>/dev/null | grep -E '\.ts$' | sort -u >"$work/selected" || true
selected=$(wc -l <"$work/selected")
if ((shards < 2 || selected < 2)); then
  "${jest[@]}" --runInBand "$@"
  exit $?
fi

# Kafka and ElasticMQ: a global setup starts the one its specs need when it is down, and its
# teardown stops what it started, which here would stop it under the other process's specs.
# Started by a shard, they are stopped once every shard has ended instead.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
declare -A down_before=()
port_open "${KAFKA_PORT:-9092}" || down_before[kafka]=${KAFKA_PORT:-9092}
port_open "${ELASTICMQ_PORT:-9324}" || down_before[elasticmq]=${ELASTICMQ_PORT:-9324}
export OUTBOX_TEST_KEEP_SERVICES=1

# A spec marked `@runs-alone` (it stops a shared broker, or sets off its memory alarm) would fail
# the other process's specs on that broker: the shards leave it out, and it runs after them, by
# itself (the sequencer's shard() reads OUTBOX_TEST_ALONE).
alone=0
while read -r spec; do
  if grep -q '@runs-alone' "$spec"; then alone=1; fi
done <"$work/selected"

# OUTBOX_TEST_RECORD_TIMES=1: each process writes its specs' times (test/support/spec-times-reporter.js).
times_out() { # name
  if [[ "${OUTBOX_TEST_RECORD_TIMES:-}" == 1 ]]; then echo "$work/times-$1.jsonl"; fi
}

pids=()
for ((i = 1; i <= shards; i++)); do
  tag="[$i/$shards]"
  OUTBOX_TEST_TIMES_OUT=$(times_out "$i") OUTBOX_TEST_ALONE=skip "${jest[@]}" --runInBand --shard="$i/$shards" --passWithNoTests --json \
    --outputFile="$work/shard-$i.json" "$@" \
    > >(sed -u "s|^|$tag |") 2> >(sed -u "s|^|$tag |" >&2) &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
if ((alone)); then
  OUTBOX_TEST_TIMES_OUT=$(times_out alone) OUTBOX_TEST_ALONE=only "${jest[@]}" --runInBand --shard=1/1 --passWithNoTests --json \
    --outputFile="$work/shard-alone.json" "$@" \
    > >(sed -u "s|^|[alone] |") 2> >(sed -u "s|^|[alone] |" >&2) || status=$?
fi

for svc in "${!down_before[@]}"; do
  if port_open "${down_before[$svc]}"; then bash "scripts/$svc.sh" stop >/dev/null 2>&1 || true; fi
done

# One line for the whole run, and the proof that the shards ran every selected spec (a split that
# differed between the processes would leave a spec out without a word).
node - "$work" "$shards" "$alone" <<'JS' || status=1
const { readFileSync, existsSync } = require('node:fs');
const [work, shards, alone] = process.argv.slice(2);
const totals = { passed: 0, failed: 0, skipped: 0, suites: 0 };
const ran = [];
const runs = Array.from({ length: Number(shards) }, (_, i) => `shard-${i + 1}`);
if (alone === '1') runs.push('shard-alone');
const results = runs.map((name) => {
  const file = `${work}/${name}.json`;
  if (!existsSync(file)) {
    console.error(`scripts/test.sh: ${name} wrote no results`);
    process.exit(1);
  }
  return JSON.parse(readFileSync(file, 'utf8'));
});
for (const r of results) {
  totals.passed += r.numPassedTests;
  totals.failed += r.numFailedTests;
  totals.skipped += r.numPendingTests + r.numTodoTests;
  totals.suites += r.numTotalTestSuites;
  ran.push(...r.testResults.map((t) => t.name));
}
// OUTBOX_TEST_RECORD_TIMES=1: each spec's time in this run, per project (a spec the opt-in
// projects run once per mode takes as long as that mode makes it), goes into
// test/support/spec-times.json, which shares out the specs of a checkout whose jest cache has no
// times (a fresh clone in CI). Times of specs this run did not select are kept.
if (process.env.OUTBOX_TEST_RECORD_TIMES === '1') {
  const file = 'test/support/spec-times.json';
  const times = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : {};
  const { readdirSync } = require('node:fs');
  for (const name of readdirSync(work).filter((f) => /^times-.*\.jsonl$/.test(f))) {
    for (const line of readFileSync(`${work}/${name}`, 'utf8').split('\n').filter(Boolean)) {
      const { key, seconds } = JSON.parse(line);
      times[key] = Math.round(10 * seconds) / 10;
    }
  }
  const sorted = Object.fromEntries(Object.keys(times).sort().map((k) => [k, times[k]]));
  require('node:fs').writeFileSync(file, `${JSON.stringify(sorted, null, 2)}\n`);
}
const selected = readFileSync(`${work}/selected`, 'utf8').split('\n').filter(Boolean);
const missing = selected.filter((p) => !ran.includes(p));
if (missing.length > 0) {
  console.error(`scripts/test.sh: no shard ran ${missing.join(', ')}`);
  process.exit(1);
}
console.log(`${totals.suites} suites in ${shards} processes`);
console.log(`${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
JS
exit "$status"
