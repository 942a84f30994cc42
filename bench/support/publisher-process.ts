/**
 * A publisher process with no database (P6's ceiling of the queue): on each "go" it publishes
 * `count` 1 KiB JSON messages with the module's message properties to one durable queue, through
 * a confirm window of 1 000 like the bare relay's, and answers "done" once every confirm is in.
 * What one queue accepts when nothing else is asked of the machine.
 */
import { randomUUID } from 'node:crypto';
import { rabbitProperties } from '../baselines/bare-relay';
import { childSide } from './child';
import { payloadOf } from './databases';
import { ConfirmLink } from './rabbit';
import { nowMs } from './stats';

export interface PublisherChildConfig {
  readonly queue: string;
}

async function main(): Promise<void> {
  const { config, send, next } = childSide<PublisherChildConfig>();
  const link = new ConfirmLink(1_000);
  const { window } = await link.get();
  send({ type: 'ready' });
  let publishes = 0;
  for (;;) {
    const command = await next(['go', 'exit']);
    if (command.type === 'exit') break;
    const count = Number(command.count);
    const from = Number(command.from ?? 0);
    const cpu = process.cpuUsage();
    // Batches of 500, two in flight, as the bare relay publishes a claimed batch.
    const inFlight: Promise<unknown>[] = [];
    for (let start = 0; start < count; start += 500) {
      const batch: Promise<void>[] = [];
      for (let seq = from + start; seq < from + Math.min(count, start + 500); seq++) {
        const key = `k${seq}`;
        const row = {
          id: String(seq),
          message_id: randomUUID(),
          topic: 'bench',
          message_key: key,
          event_type: 'order.created',
          payload: payloadOf(seq, key),
        };
        batch.push(
          window.publish(
            '',
            config.queue,
            Buffer.from(row.payload, 'utf8'),
            rabbitProperties(row, 'outbox', ++publishes),
          ),
        );
      }
      inFlight.push(Promise.all(batch));
      if (inFlight.length >= 2) await inFlight.shift();
    }
    await Promise.all(inFlight);
    const used = process.cpuUsage(cpu);
    send({ type: 'done', finishedAt: nowMs(), cpuUs: used.user + used.system });
  }
  await link.close();
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
