import { createHook } from 'node:async_hooks';
import { Socket } from 'node:net';
import { sleep } from './wait-for';

// The run ends by itself (no --forceExit): with --runInBand every spec runs in this process, so
// whatever a spec leaves open is here at the global teardown. The teardown waits a moment for
// late closes, then names what is left (which server a socket talks to, a timer's delay and
// callback), closes it so that the process can end, and fails the run.

interface ProcessWithHandles {
  _getActiveHandles(): unknown[];
}

const KNOWN_PORTS: Record<number, string> = {
  5432: 'PostgreSQL',
  3306: 'MariaDB',
  5672: 'RabbitMQ',
  6379: 'Redis',
  1883: 'MQTT',
  4222: 'NATS',
  9092: 'Kafka',
  9324: 'ElasticMQ',
  8083: 'Kafka Connect',
};

const state = globalThis as {
  __outboxBaselineHandles?: Set<unknown>;
  __outboxBaselineTimers?: number;
  __outboxHandleStacks?: WeakMap<object, string>;
  __outboxTimers?: Set<object>;
};

// Timers are not handles to Node (they are not in _getActiveHandles()); they are counted among
// the active resources, and named only when their creation is tracked.
function activeTimers(): number {
  return process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
}

function active(): unknown[] {
  return (process as unknown as ProcessWithHandles)._getActiveHandles();
}

function refed(handle: unknown): boolean {
  const h = handle as { hasRef?: () => boolean };
  return typeof h.hasRef !== 'function' || h.hasRef();
}

/** Called by the global setup: what the runner itself holds is not a spec's leak. */
export function recordBaselineHandles(): void {
  state.__outboxBaselineHandles = new Set(active());
  state.__outboxBaselineTimers = activeTimers();
  if (process.env.OUTBOX_TEST_HANDLE_STACKS === '1') {
    // Creation stacks for the report; off by default (a stack per resource slows every spec).
    const stacks = new WeakMap<object, string>();
    const timers = new Set<object>();
    const byId = new Map<number, object>();
    state.__outboxHandleStacks = stacks;
    state.__outboxTimers = timers;
    createHook({
      init(id, type, _trigger, resource) {
        if (type === 'PROMISE') return;
        // Without the message line and this hook's own frame.
        const stack = (new Error(type).stack ?? '').split('\n').slice(2).join('\n');
        stacks.set(resource, stack);
        if (type === 'Timeout') {
          timers.add(resource);
          byId.set(id, resource);
        }
      },
      destroy(id) {
        const timer = byId.get(id);
        if (timer) timers.delete(timer);
        byId.delete(id);
      },
    }).enable();
  }
}

function leftovers(): unknown[] {
  const baseline = state.__outboxBaselineHandles ?? new Set<unknown>();
  const handles = active().filter(
    (h) => !baseline.has(h) && h !== process.stdout && h !== process.stderr && refed(h),
  );
  const extraTimers = activeTimers() - (state.__outboxBaselineTimers ?? 0);
  if (extraTimers <= 0) return handles;
  const named = [...(state.__outboxTimers ?? [])].filter(
    (t) => refed(t) && !state.__outboxHandleStacks?.get(t)?.includes('open-handles'),
  );
  return [...handles, ...(named.length > 0 ? named : [`${extraTimers} timer(s)`])];
}

function describe(handle: unknown): string {
  if (typeof handle === 'string') return handle;
  const stack = state.__outboxHandleStacks?.get(handle as object);
  const frames = stack
    ?.split('\n')
    .filter((line) => !line.includes('node:'))
    .slice(0, 5);
  const where = frames ? `\n      created${frames.join('\n      ')}` : '';
  if (handle instanceof Socket) {
    const port = handle.remotePort;
    const server = port !== undefined ? (KNOWN_PORTS[port] ?? 'port') : 'unconnected';
    return `socket to ${server} ${handle.remoteAddress ?? ''}:${port ?? ''} (local port ${handle.localPort ?? '?'})${where}`;
  }
  const timer = handle as { _idleTimeout?: number; _onTimeout?: () => void; _repeat?: unknown };
  if (typeof timer._onTimeout === 'function') {
    const body = timer._onTimeout.toString().replace(/\s+/g, ' ').slice(0, 120);
    const kind = timer._repeat ? 'interval' : 'timeout';
    return `${kind} of ${timer._idleTimeout ?? '?'} ms: ${body}${where}`;
  }
  const name = (handle as object | null)?.constructor?.name ?? typeof handle;
  return `${name}${where}`;
}

function close(handle: unknown): void {
  if (handle instanceof Socket) {
    handle.destroy();
    return;
  }
  if (typeof handle === 'string') return;
  const h = handle as { unref?: () => void; close?: () => void };
  if (typeof h.unref === 'function') h.unref();
  else if (typeof h.close === 'function') h.close();
}

/** Called by the global teardown: fails the run, naming them, when specs left handles open. */
export async function failOnOpenHandles(graceMs = 10_000): Promise<void> {
  const deadline = Date.now() + graceMs;
  let left = leftovers();
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(200);
    left = leftovers();
  }
  if (left.length === 0) return;
  const lines = left.map((h) => `  - ${describe(h)}`).join('\n');
  left.forEach(close);
  throw new Error(
    `${left.length} handle(s) still open ${graceMs} ms after the last spec; a spec or the ` +
      `library leaves them (run with OUTBOX_TEST_HANDLE_STACKS=1 for where each was made):\n${lines}`,
  );
}
