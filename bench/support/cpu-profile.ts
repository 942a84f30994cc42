/** Reads a V8 .cpuprofile (node --cpu-prof) and says where the time of a window went. */
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileSummary {
  readonly windowMs: number;
  readonly idleMs: number;
  readonly gcMs: number;
  /** Non-idle share of the window: how busy the event loop's thread was. */
  readonly busyPct: number;
  readonly byCategory: { name: string; ms: number; pct: number }[];
  readonly topSelf: { fn: string; where: string; category: string; ms: number; pct: number }[];
}

const ROOT = relative('/', process.cwd());

export function categoryOf(url: string, fn: string): string {
  if (fn === '(idle)') return 'idle';
  if (fn === '(garbage collector)') return 'GC';
  if (fn === '(program)') return 'V8/native (program)';
  if (url === '') return 'V8/native (program)';
  if (url.includes('/node_modules/')) {
    const m = /\/node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
    const pkg = m?.[1] ?? 'other';
    if (
      [
        'pg',
        'pg-protocol',
        'pg-types',
        'pg-pool',
        'postgres-array',
        'pgpass',
        'pg-connection-string',
      ].includes(pkg)
    )
      return 'pg driver';
    if (pkg === 'typeorm') return 'TypeORM';
    if (['amqplib', '@acuminous/bitsyntax', 'buffer-more-ints', 'bitsyntax'].includes(pkg))
      return 'amqplib';
    if (pkg.startsWith('@nestjs/')) return 'Nest';
    if (pkg === 'rxjs') return 'rxjs';
    if (['ts-node', 'typescript', '@cspotcode/source-map-support'].includes(pkg)) return 'ts-node';
    return pkg;
  }
  if (url.startsWith('node:')) return 'Node internals';
  if (url.includes('/lib/')) return 'nestjs-outbox (lib/)';
  if (url.includes('/bench/')) return 'bench harness';
  return 'other';
}

function shortUrl(url: string, line: number): string {
  let u = url.replace(/^file:\/\//, '');
  const nm = u.lastIndexOf('/node_modules/');
  if (nm >= 0) u = u.slice(nm + '/node_modules/'.length);
  else if (ROOT !== '' && u.startsWith(`/${ROOT}/`)) u = u.slice(ROOT.length + 2);
  return u === '' ? '' : `${u}:${line + 1}`;
}

/** Self time per function and per category within [fromUs, toUs] (the profile's monotonic clock). */
export function summariseProfile(
  file: string,
  fromUs?: number,
  toUs?: number,
  top = 15,
): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  let t = profile.startTime;
  const from = fromUs ?? profile.startTime;
  const to = toUs ?? profile.endTime;
  let windowUs = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const delta = profile.timeDeltas[i] ?? 0;
    t += delta;
    if (t < from || t > to) continue;
    const id = profile.samples[i] as number;
    // A sample's time is the gap to the next sample.
    const next = profile.timeDeltas[i + 1] ?? 0;
    self.set(id, (self.get(id) ?? 0) + next);
    windowUs += next;
  }
  const cats = new Map<string, number>();
  const fns = new Map<string, { fn: string; where: string; category: string; us: number }>();
  for (const [id, us] of self) {
    const node = byId.get(id);
    if (node === undefined) continue;
    const { functionName, url, lineNumber } = node.callFrame;
    const category = categoryOf(url, functionName);
    cats.set(category, (cats.get(category) ?? 0) + us);
    const fn = functionName === '' ? '(anonymous)' : functionName;
    const key = `${fn}@${url}:${lineNumber}`;
    const entry = fns.get(key) ?? { fn, where: shortUrl(url, lineNumber), category, us: 0 };
    entry.us += us;
    fns.set(key, entry);
  }
  const ms = (us: number): number => Math.round(us / 100) / 10;
  const pct = (us: number): number => Math.round((1000 * us) / Math.max(1, windowUs)) / 10;
  const idle = cats.get('idle') ?? 0;
  return {
    windowMs: ms(windowUs),
    idleMs: ms(idle),
    gcMs: ms(cats.get('GC') ?? 0),
    busyPct: pct(windowUs - idle),
    byCategory: [...cats.entries()]
      .sort((a, b) => b[1] - a[1])
      .map(([name, us]) => ({ name, ms: ms(us), pct: pct(us) })),
    topSelf: [...fns.values()]
      .filter((f) => f.category !== 'idle')
      .sort((a, b) => b.us - a.us)
      .slice(0, top)
      .map((f) => ({
        fn: f.fn,
        where: f.where,
        category: f.category,
        ms: ms(f.us),
        pct: pct(f.us),
      })),
  };
}
