import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { failOnOpenHandles } from './open-handles';

export default async function globalTeardown(): Promise<void> {
  const containers =
    (globalThis as { __outboxContainers?: { stop(): Promise<unknown> }[] }).__outboxContainers ??
    [];
  await Promise.all(containers.map((c) => c.stop()));
  // One of several jest processes run side by side (scripts/test.sh): the others may still be
  // using what this one started; the script stops it once they have all ended.
  const keep = process.env.OUTBOX_TEST_KEEP_SERVICES === '1';
  if (process.env.OUTBOX_TEST_STARTED_KAFKA === '1' && !keep) {
    // Only the broker this run started: one started by hand or by CI is left alone.
    execFileSync('bash', [join(__dirname, '../../scripts/kafka.sh'), 'stop'], { stdio: 'ignore' });
  }
  if (process.env.OUTBOX_TEST_STARTED_ELASTICMQ === '1' && !keep) {
    execFileSync('bash', [join(__dirname, '../../scripts/elasticmq.sh'), 'stop'], {
      stdio: 'ignore',
    });
  }
  await failOnOpenHandles();
}
