import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { failOnOpenHandles } from './open-handles';

export default async function globalTeardown(): Promise<void> {
  const containers =
    (globalThis as { __outboxContainers?: { stop(): Promise<unknown> }[] }).__outboxContainers ??
    [];
  await Promise.all(containers.map((c) => c.stop()));
  if (process.env.OUTBOX_TEST_STARTED_KAFKA === '1') {
    // Only the broker this run started: one started by hand or by CI is left alone.
    execFileSync('bash', [join(__dirname, '../../scripts/kafka.sh'), 'stop'], { stdio: 'ignore' });
  }
  if (process.env.OUTBOX_TEST_STARTED_ELASTICMQ === '1') {
    execFileSync('bash', [join(__dirname, '../../scripts/elasticmq.sh'), 'stop'], {
      stdio: 'ignore',
    });
  }
  await failOnOpenHandles();
}
