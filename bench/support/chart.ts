/** A hand-written SVG of the run: drain throughput per scenario and P4's latency. */
import { writeFileSync } from 'node:fs';

interface Range {
  min: number;
  max: number;
}

interface ScenarioJson {
  medians?: Record<string, number>;
  ranges?: Record<string, Range>;
}

interface RunJson {
  profile: string;
  environment: {
    machine: { cores: number; memoryGiB: number };
    postgres: string;
    mariadb: string;
    rabbitmq: string;
    kafka: string;
  };
  scenarios: Record<string, ScenarioJson>;
}

interface Bar {
  group: string;
  label: string;
  median: number;
  min: number;
  max: number;
  ours: boolean;
}

const THROUGHPUT: [string, string, string, boolean][] = [
  ['P1', 'module_msgs_per_s', 'nestjs-outbox', true],
  ['P1', 'bare_msgs_per_s', 'bare pipelined relay', false],
  ['P1', 'naive_msgs_per_s', 'naive relay', false],
  ['P1', 'pgto_fast_msgs_per_s', 'pg-transactional-outbox (10 handlers)', false],
  ['P1', 'pgto_readme_msgs_per_s', 'pg-transactional-outbox (README)', false],
  ['P2', 'module_msgs_per_s', 'nestjs-outbox', true],
  ['P2', 'bare_kafka_msgs_per_s', 'bare sendBatch relay', false],
  ['P3', 'mariadb_msgs_per_s', 'MariaDB → RabbitMQ', true],
  ['P3', 'sqlite_tcp_msgs_per_s', 'SQLite → TCP', true],
  ['P6', 'd1_msgs_per_s', '1 dispatcher', true],
  ['P6', 'd2_msgs_per_s', '2 dispatchers', true],
  ['P6', 'd4_msgs_per_s', '4 dispatchers', true],
  ['P7', 'empty_msgs_per_s', 'empty history', true],
  ['P7', 'history_msgs_per_s', 'large delivered history', true],
  ['P7', 'partitioned_msgs_per_s', 'same history in a past partition', true],
];

const GROUPS: Record<string, string> = {
  P1: 'P1 PostgreSQL → RabbitMQ',
  P2: 'P2 PostgreSQL → Kafka',
  P3: 'P3 other databases',
  P6: 'P6 scale-out',
  P7: 'P7 retained history',
};

const LATENCY: [string, string][] = [
  ['listen_p50_ms', 'LISTEN/NOTIFY p50'],
  ['listen_p99_ms', 'LISTEN/NOTIFY p99'],
  ['polling_p50_ms', 'polling only p50'],
  ['polling_p99_ms', 'polling only p99'],
];

function bar(
  run: RunJson,
  id: string,
  key: string,
): { median: number; min: number; max: number } | undefined {
  const s = run.scenarios[id];
  const median = s?.medians?.[key];
  const range = s?.ranges?.[key];
  if (median === undefined || median === null || !Number.isFinite(median)) return undefined;
  return { median, min: range?.min ?? median, max: range?.max ?? median };
}

const esc = (s: string): string =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const num = (v: number): string =>
  v >= 100 ? Math.round(v).toLocaleString('en-US') : v >= 10 ? v.toFixed(1) : v.toFixed(2);

export function renderChart(path: string, json: unknown): void {
  const run = json as RunJson;
  const bars: Bar[] = [];
  for (const [id, key, label, ours] of THROUGHPUT) {
    const b = bar(run, id, key);
    if (b !== undefined) bars.push({ group: id, label, ours, ...b });
  }
  const lat = LATENCY.map(([key, label]) => ({
    label,
    ...(bar(run, 'P4', key) ?? { median: Number.NaN, min: Number.NaN, max: Number.NaN }),
  })).filter((l) => Number.isFinite(l.median));

  const width = 960;
  const labelW = 300;
  const plotW = width - labelW - 110;
  const rowH = 22;
  const groupGap = 16;
  const top = 70;
  const groups = [...new Set(bars.map((b) => b.group))];
  const throughputH = bars.length * rowH + groups.length * (groupGap + 18);
  const latTop = top + throughputH + 60;
  const height = latTop + lat.length * rowH + 70;
  const maxRate = Math.max(1, ...bars.map((b) => b.max));
  const scaleX = (v: number): number => (v / maxRate) * plotW;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="13">`,
  );
  out.push(`<rect width="100%" height="100%" fill="#ffffff"/>`);
  const env = run.environment;
  out.push(
    `<text x="20" y="28" font-size="17" font-weight="600">nestjs-outbox benchmark (${esc(run.profile)} profile): drain throughput, msgs/s</text>`,
  );
  out.push(
    `<text x="20" y="48" fill="#555">${esc(`${env.machine.cores} cores, ${env.machine.memoryGiB} GiB · PostgreSQL ${env.postgres} · MariaDB ${env.mariadb.split('-')[0]} · RabbitMQ ${env.rabbitmq} · Kafka ${env.kafka.split(' ')[0]} · median of runs, whiskers min–max · 1 KiB payloads`)}</text>`,
  );
  let y = top;
  for (const g of groups) {
    out.push(
      `<text x="20" y="${y + 12}" font-weight="600" fill="#222">${esc(GROUPS[g] ?? g)}</text>`,
    );
    y += 18;
    for (const b of bars.filter((x) => x.group === g)) {
      const w = Math.max(1, scaleX(b.median));
      const color = b.ours ? '#2563eb' : '#9ca3af';
      out.push(
        `<text x="${labelW - 8}" y="${y + 15}" text-anchor="end" fill="#333">${esc(b.label)}</text>`,
      );
      out.push(
        `<rect x="${labelW}" y="${y + 3}" width="${w.toFixed(1)}" height="${rowH - 6}" fill="${color}" rx="2"/>`,
      );
      if (b.max > b.min) {
        const x1 = labelW + scaleX(b.min);
        const x2 = labelW + scaleX(b.max);
        const cy = y + rowH / 2;
        out.push(
          `<path d="M${x1.toFixed(1)} ${cy} H${x2.toFixed(1)} M${x1.toFixed(1)} ${cy - 4} V${cy + 4} M${x2.toFixed(1)} ${cy - 4} V${cy + 4}" stroke="#111" stroke-width="1"/>`,
        );
      }
      out.push(
        `<text x="${labelW + Math.max(w, scaleX(b.max)) + 6}" y="${y + 15}" fill="#111">${num(b.median)}</text>`,
      );
      y += rowH;
    }
    y += groupGap;
  }
  // Latency panel on a log axis (1 ms … ≥ the largest value).
  out.push(
    `<text x="20" y="${latTop - 22}" font-size="17" font-weight="600">P4 commit → consumer latency at 1 000 msgs/s, ms (log scale)</text>`,
  );
  const maxLat = Math.max(10, ...lat.map((l) => l.max));
  const decades = Math.ceil(Math.log10(maxLat));
  const logX = (v: number): number => (Math.log10(Math.max(1, v)) / decades) * plotW;
  for (let d = 0; d <= decades; d++) {
    const x = labelW + (d / decades) * plotW;
    out.push(
      `<line x1="${x}" y1="${latTop - 6}" x2="${x}" y2="${latTop + lat.length * rowH}" stroke="#e5e7eb"/>`,
    );
    out.push(
      `<text x="${x}" y="${latTop + lat.length * rowH + 16}" text-anchor="middle" fill="#666" font-size="11">${10 ** d}</text>`,
    );
  }
  y = latTop;
  for (const l of lat) {
    const w = Math.max(1, logX(l.median));
    const color = l.label.startsWith('LISTEN') ? '#2563eb' : '#9ca3af';
    out.push(
      `<text x="${labelW - 8}" y="${y + 15}" text-anchor="end" fill="#333">${esc(l.label)}</text>`,
    );
    out.push(
      `<rect x="${labelW}" y="${y + 3}" width="${w.toFixed(1)}" height="${rowH - 6}" fill="${color}" rx="2"/>`,
    );
    if (l.max > l.min) {
      const x1 = labelW + logX(l.min);
      const x2 = labelW + logX(l.max);
      const cy = y + rowH / 2;
      out.push(
        `<path d="M${x1.toFixed(1)} ${cy} H${x2.toFixed(1)} M${x1.toFixed(1)} ${cy - 4} V${cy + 4} M${x2.toFixed(1)} ${cy - 4} V${cy + 4}" stroke="#111" stroke-width="1"/>`,
      );
    }
    out.push(
      `<text x="${labelW + Math.max(w, logX(l.max)) + 6}" y="${y + 15}" fill="#111">${num(l.median)} ms</text>`,
    );
    y += rowH;
  }
  out.push('</svg>');
  writeFileSync(path, `${out.join('\n')}\n`);
}
