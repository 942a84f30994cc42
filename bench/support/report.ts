/** Scenario results, the stdout table and bench/results/summary.json. */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { DataSource } from 'typeorm';
import type { BenchProfile } from './config';
import type { Rabbit } from './rabbit';
import type { PgSettings } from './services';
import { round, summarise, type Summary } from './stats';

export interface Metric {
  readonly key: string;
  readonly label: string;
  readonly unit: string;
  readonly summary: Summary;
  /** Messages (or transactions) per measurement, when it differs from the scenario's headline size. */
  readonly size?: number;
}

export interface Target {
  readonly key: string;
  readonly label: string;
  readonly value: number;
  readonly op: '>=' | '<=' | '==';
  readonly threshold: number;
  readonly met: boolean;
}

export interface ScenarioResult {
  readonly id: string;
  readonly title: string;
  readonly metrics: Metric[];
  /** Plain keys (p1_vs_bare, p4_p99_ms …) with single numbers: ratios of medians and derived values. */
  readonly values: Record<string, number | string | boolean | null>;
  readonly targets: Target[];
  readonly notes: string[];
  readonly skipped: string[];
}

export function newResult(id: string, title: string): ScenarioResult {
  return { id, title, metrics: [], values: {}, targets: [], notes: [], skipped: [] };
}

export function addMetric(
  result: ScenarioResult,
  key: string,
  label: string,
  unit: string,
  runs: readonly number[],
  size?: number,
): Summary {
  const summary = summarise(runs);
  result.metrics.push({ key, label, unit, summary, size });
  return summary;
}

export function addTarget(
  result: ScenarioResult,
  key: string,
  label: string,
  value: number,
  op: Target['op'],
  threshold: number,
): void {
  const met =
    Number.isFinite(value) &&
    (op === '>=' ? value >= threshold : op === '<=' ? value <= threshold : value === threshold);
  result.values[key] = Number.isFinite(value) ? round(value, 3) : null;
  result.targets.push({ key, label, value, op, threshold, met });
}

export interface BenchContext {
  readonly profile: BenchProfile;
  readonly runs: number;
  readonly pg: DataSource;
  readonly rabbit: Rabbit;
  readonly pgSettings: PgSettings;
  log(line: string): void;
}

const fmt = (v: number, unit: string): string => {
  if (!Number.isFinite(v)) return 'n/a';
  if (unit === 'msgs/s' || unit === 'tx/s') return Math.round(v).toLocaleString('en-US');
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 10) return v.toFixed(1);
  return v.toFixed(2);
};

/** The table printed at the end of a run. */
export function renderTable(results: readonly ScenarioResult[]): string {
  const lines: string[] = [];
  const pad = (s: string, n: number): string => (s.length >= n ? s : s + ' '.repeat(n - s.length));
  const lpad = (s: string, n: number): string => (s.length >= n ? s : ' '.repeat(n - s.length) + s);
  for (const r of results) {
    lines.push('');
    lines.push(`${r.id}  ${r.title}`);
    for (const m of r.metrics) {
      const { median, min, max } = m.summary;
      const size = m.size === undefined ? '' : `  (n=${m.size.toLocaleString('en-US')})`;
      lines.push(
        `    ${pad(m.label, 52)} ${lpad(fmt(median, m.unit), 10)} ${pad(m.unit, 7)} [${fmt(min, m.unit)} – ${fmt(max, m.unit)}]${size}`,
      );
    }
    for (const t of r.targets) {
      const mark = t.met ? 'MET   ' : 'MISSED';
      lines.push(
        `    ${mark} ${pad(`${t.key}: ${t.label}`, 58)} ${lpad(fmt(t.value, ''), 8)}  (target ${t.op} ${t.threshold})`,
      );
    }
    for (const [k, v] of Object.entries(r.values)) {
      if (r.targets.some((t) => t.key === k)) continue;
      lines.push(
        `           ${pad(k, 58)} ${lpad(typeof v === 'number' ? fmt(v, '') : String(v), 8)}`,
      );
    }
    for (const s of r.skipped) lines.push(`    SKIPPED ${s}`);
    for (const n of r.notes) lines.push(`    note: ${n}`);
  }
  return lines.join('\n');
}

export function writeJson(path: string, data: unknown): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(
    path,
    `${JSON.stringify(data, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v), 2)}\n`,
  );
}

/** JSON shape of one scenario: medians (and ranges) per metric, then every plain value. */
export function scenarioJson(r: ScenarioResult): Record<string, unknown> {
  const medians: Record<string, number> = {};
  const ranges: Record<
    string,
    { min: number; max: number; runs: readonly number[]; unit: string; size?: number }
  > = {};
  for (const m of r.metrics) {
    medians[m.key] = round(m.summary.median, 3);
    ranges[m.key] = {
      min: round(m.summary.min, 3),
      max: round(m.summary.max, 3),
      runs: m.summary.runs.map((v) => round(v, 3)),
      unit: m.unit,
      ...(m.size === undefined ? {} : { size: m.size }),
    };
  }
  return {
    title: r.title,
    medians,
    ...r.values,
    ranges,
    targets: r.targets.map((t) => ({
      key: t.key,
      label: t.label,
      value: Number.isFinite(t.value) ? round(t.value, 3) : null,
      target: `${t.op} ${t.threshold}`,
      met: t.met,
    })),
    notes: r.notes,
    skipped: r.skipped,
  };
}

/**
 * bench/results/summary.json, the one results file: per profile (`quick`, `full`, a scaled-down
 * `quick@0.1` …) the latest measurement of each scenario with the run it came from, and the
 * latest `--profile` CPU profiles. A run of some scenarios replaces only theirs, so the file
 * always holds the newest figure of every scenario instead of one file per kind of run.
 */
export interface ResultsSummary {
  profiles: Record<string, Record<string, Record<string, unknown>>>;
  cpuProfile?: unknown;
  /** The latest `--profile kafka` CPU profile. */
  cpuProfileKafka?: unknown;
  /** The latest with `--profile-claims partitions|stream` (`cpuProfilePartitions`, …). */
  [claimsProfile: `cpuProfile${string}`]: unknown;
}

export const SUMMARY_FILE = 'summary.json';

export function readSummary(resultsDir: string): ResultsSummary {
  const path = join(resultsDir, SUMMARY_FILE);
  if (!existsSync(path)) return { profiles: {} };
  const parsed = JSON.parse(readFileSync(path, 'utf8')) as Partial<ResultsSummary>;
  return { ...parsed, profiles: parsed.profiles ?? {} };
}

/** Reads the summary, lets `change` edit it, and writes it back. */
export function updateSummary(resultsDir: string, change: (summary: ResultsSummary) => void): void {
  const summary = readSummary(resultsDir);
  change(summary);
  writeJson(join(resultsDir, SUMMARY_FILE), summary);
}

/** Records each scenario of one run under its profile, with the run's header (`run`). */
export function recordScenarios(
  resultsDir: string,
  profileKey: string,
  run: Record<string, unknown>,
  scenarios: Record<string, Record<string, unknown>>,
): void {
  updateSummary(resultsDir, (summary) => {
    const kept = summary.profiles[profileKey] ?? {};
    for (const [id, scenario] of Object.entries(scenarios)) kept[id] = { ...scenario, run };
    // Scenario order (P1 … P9), whatever order the runs came in.
    summary.profiles[profileKey] = Object.fromEntries(
      Object.entries(kept).sort(([a], [b]) => a.localeCompare(b, 'en', { numeric: true })),
    );
  });
}
