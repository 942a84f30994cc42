#!/usr/bin/env node
// The `outbox` command (package.json "bin"): operations on the outbox table from a shell.
import { describeError } from '../../internal/describe-error';
import { runOutboxCli } from './outbox-cli';

runOutboxCli(process.argv.slice(2), process.env, {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
}).then(
  (code) => {
    // Exit by running dry, so piped output is flushed; a driver socket that outlives its
    // DataSource must still not keep the command alive.
    process.exitCode = code;
    setTimeout(() => process.exit(code), 5_000).unref();
  },
  // runOutboxCli does not reject; this is the last guard against a silent exit code 0.
  (error: unknown) => {
    process.stderr.write(`outbox: unexpected failure: ${describeError(error)}\n`);
    process.exitCode = 1;
  },
);
