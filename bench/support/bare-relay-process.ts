/**
 * The bare pipelined relay in a process of its own, serving a table as a dispatcher would (L2's
 * latency reference, and L3's beside the writers): on "go" it drains the table into the queue, looks
 * again `idleMs` after finding it empty, and on "stop" reports "done" with what it published and
 * the CPU it used since "go"; then the next "go", or "exit".
 */
import 'reflect-metadata';
import { bareRabbitRelay } from '../baselines/bare-relay';
import { bareMariaRabbitRelay, mariaPool } from '../baselines/bare-relay-mariadb';
import { childSide } from './child';
import { pgPool } from './databases';
import { ConfirmLink } from './rabbit';
import { sleep } from '../../test/support/wait-for';

export interface BareRelayChildConfig {
  readonly database: 'postgres' | 'mariadb';
  readonly table: string;
  readonly queue: string;
  /** The relay's poll interval while the table is empty. */
  readonly idleMs: number;
}

async function main(): Promise<void> {
  const { config, send, next } = childSide<BareRelayChildConfig>();
  const { table, queue } = config;
  const pg = config.database === 'postgres' ? pgPool(4) : undefined;
  const maria = config.database === 'mariadb' ? mariaPool(4) : undefined;
  const link = new ConfirmLink(1_000);
  await link.get();
  send({ type: 'ready' });
  for (;;) {
    const command = await next(['go', 'exit']);
    if (command.type === 'exit') break;
    let stopping = false;
    let published = 0;
    const cpu = process.cpuUsage();
    const loop = (async () => {
      while (!stopping) {
        const { window } = await link.get();
        const n =
          pg !== undefined
            ? await bareRabbitRelay({ pool: pg, table, window, queue })
            : maria !== undefined
              ? await bareMariaRabbitRelay({ pool: maria, table, window, queue })
              : 0;
        published += n;
        if (n === 0) await sleep(config.idleMs);
      }
    })();
    await next('stop');
    stopping = true;
    await loop;
    const used = process.cpuUsage(cpu);
    send({ type: 'done', outages: 0, published, cpuUs: used.user + used.system });
  }
  await link.close();
  await pg?.end();
  await maria?.end();
  process.exit(0);
}

main().catch((error: unknown) => {
  console.error('bare relay child failed:', error);
  process.exit(1);
});
