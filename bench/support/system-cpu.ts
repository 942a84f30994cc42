/**
 * CPU time of the machine and of its services over a window, read from /proc (Linux): a
 * scenario's processes share the cores with PostgreSQL and the broker, so a rate alone cannot
 * say whose CPU limited it (P6). Elsewhere (no /proc) the readings are undefined and the
 * scenario reports rates only.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/** Services by their process name, as /proc/<pid>/stat gives it. */
const SERVICES: Readonly<Record<string, string>> = {
  postgres: 'postgres',
  'beam.smp': 'rabbitmq',
};

export interface CpuReading {
  /** Busy and idle time of all cores, in microseconds. */
  readonly busyUs: number;
  readonly idleUs: number;
  /** CPU time of each process of a service, by pid, in microseconds. */
  readonly services: ReadonlyMap<string, ReadonlyMap<number, number>>;
}

export interface CpuUse {
  /** Share of the cores' time that was busy, whoever used it. */
  readonly busyShare: number;
  /** CPU time each service used, in microseconds. */
  readonly servicesUs: Readonly<Record<string, number>>;
}

let tickUs: number | undefined;

/** Microseconds per clock tick (USER_HZ), the unit of /proc's CPU times. */
function microsecondsPerTick(): number {
  if (tickUs === undefined) {
    let hz = 100;
    try {
      hz = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      // getconf missing: Linux's USER_HZ is 100 on every architecture the bench runs on.
    }
    tickUs = 1_000_000 / hz;
  }
  return tickUs;
}

/**
 * A process's time on a CPU in microseconds, from the schedstat (nanoseconds) of each of its
 * threads, or undefined where the kernel has none. /proc/<pid>/stat counts in clock ticks
 * (10 ms), and a service of a dozen processes then reads up to a tick off for each: over a
 * drain of a few seconds, several microseconds per message. /proc/<pid>/schedstat alone is the
 * main thread's: RabbitMQ's Erlang VM works on scheduler threads, and read that way it used no
 * CPU at all (bench P6).
 */
function onCpuUs(pid: string, threads: number): number | undefined {
  try {
    // A thread that exits between two readings takes its time with it; the Erlang VM's
    // scheduler threads live as long as the broker.
    const files =
      threads > 1
        ? readdirSync(`/proc/${pid}/task`).map((tid) => `/proc/${pid}/task/${tid}/schedstat`)
        : [`/proc/${pid}/schedstat`];
    let ns = 0;
    for (const file of files) ns += Number(readFileSync(file, 'utf8').split(' ')[0]);
    return Number.isFinite(ns) ? ns / 1000 : undefined;
  } catch {
    return undefined;
  }
}

export function readCpu(): CpuReading | undefined {
  let stat: string;
  try {
    stat = readFileSync('/proc/stat', 'utf8');
  } catch {
    return undefined;
  }
  const tick = microsecondsPerTick();
  // cpu  user nice system idle iowait irq softirq steal …
  const fields = (stat.split('\n')[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] =
    fields;
  const services = new Map<string, Map<number, number>>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let text: string;
    try {
      text = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // pid (comm) state … utime stime: the name may hold spaces, so split after its ")".
    const open = text.indexOf('(');
    const close = text.lastIndexOf(')');
    const service = SERVICES[text.slice(open + 1, close)];
    if (service === undefined) continue;
    const rest = text.slice(close + 2).split(' ');
    // After "(comm) ": state is rest[0], utime and stime rest[11] and rest[12], num_threads rest[17].
    const used = onCpuUs(entry, Number(rest[17])) ?? (Number(rest[11]) + Number(rest[12])) * tick;
    let pids = services.get(service);
    if (pids === undefined) services.set(service, (pids = new Map()));
    pids.set(Number(entry), used);
  }
  return {
    busyUs: (user + nice + system + irq + softirq + steal) * tick,
    idleUs: (idle + iowait) * tick,
    services,
  };
}

/**
 * What was used between two readings. A process started in between counts whole; one that
 * exited in between is missing (a connection closed during the window).
 */
export function cpuBetween(start: CpuReading, end: CpuReading): CpuUse {
  const busy = end.busyUs - start.busyUs;
  const total = busy + end.idleUs - start.idleUs;
  const servicesUs: Record<string, number> = {};
  for (const service of Object.values(SERVICES)) {
    const before = start.services.get(service);
    let used = 0;
    for (const [pid, us] of end.services.get(service) ?? []) used += us - (before?.get(pid) ?? 0);
    servicesUs[service] = used;
  }
  return { busyShare: total > 0 ? busy / total : Number.NaN, servicesUs };
}
