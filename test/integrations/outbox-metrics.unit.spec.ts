import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { OutboxOptionsError, type OutboxPublishedRecord } from '../../lib';
import { OutboxMetrics } from '../../lib/integrations/prometheus';

// The per-message histograms of one OutboxMetrics, fed as the dispatcher feeds them.

const record = (topic: string, attempts: number, latencyMs: number): OutboxPublishedRecord => ({
  id: '1',
  messageId: '0190a0b8-7c1e-7a2b-8c3d-4e5f60718293',
  topic,
  key: null,
  type: 'T',
  payload: '{}',
  headers: {},
  attempts,
  createdAt: new Date(0),
  latencyMs,
});

const sample = async (registry: Registry, name: string): Promise<number | undefined> => {
  const line = (await registry.metrics()).split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
};

describe('OutboxMetrics per-message histograms', () => {
  it('puts each published message in its attempts and latency buckets, by topic', async () => {
    const registry = new Registry();
    const metrics = new OutboxMetrics({ registry, latencyBuckets: [0.1, 1, 10] });
    metrics.onPublished([record('a', 1, 50), record('a', 3, 2_500), record('b', 12, 400)]);

    expect(await sample(registry, 'outbox_delivery_attempts_bucket{le="1",topic="a"}')).toBe(1);
    expect(await sample(registry, 'outbox_delivery_attempts_bucket{le="3",topic="a"}')).toBe(2);
    expect(await sample(registry, 'outbox_delivery_attempts_bucket{le="10",topic="b"}')).toBe(0);
    expect(await sample(registry, 'outbox_delivery_attempts_bucket{le="20",topic="b"}')).toBe(1);
    expect(
      await sample(registry, 'outbox_message_latency_seconds_bucket{le="0.1",topic="a"}'),
    ).toBe(1);
    expect(await sample(registry, 'outbox_message_latency_seconds_bucket{le="1",topic="a"}')).toBe(
      1,
    );
    expect(await sample(registry, 'outbox_message_latency_seconds_bucket{le="10",topic="a"}')).toBe(
      2,
    );
    expect(await sample(registry, 'outbox_message_latency_seconds_sum{topic="b"}')).toBe(0.4);
    expect(await sample(registry, 'outbox_messages_published_total{topic="a"}')).toBe(2);
  });

  it.each([['latencyBuckets'], ['attemptsBuckets']])(
    'refuses %s that are not increasing positive numbers',
    (option) => {
      expect(() => new OutboxMetrics({ registry: new Registry(), [option]: [5, 1] })).toThrow(
        OutboxOptionsError,
      );
      expect(() => new OutboxMetrics({ registry: new Registry(), [option]: [] })).toThrow(
        new RegExp(`"${option}"`),
      );
    },
  );
});

describe('the metrics table of docs/observability.md', () => {
  it('lists every metric OutboxMetrics registers, with its type, and no other', () => {
    const registry = new Registry();
    new OutboxMetrics({ registry, tenantLabel: { maxTenants: 10 } });
    const registered = registry
      .getMetricsAsArray()
      .map((m) => `${m.name} ${String(m.type)}`)
      .sort();
    const page = readFileSync(join(__dirname, '../../docs/observability.md'), 'utf8');
    // Rows of the table: | `name{labels}` | type | meaning |
    const documented = [...page.matchAll(/^\| `(outbox_[a-z_]+)(?:\{[^}]*\})?` \| (\w+) \|/gm)]
      .map(([, name, type]) => `${name ?? ''} ${type ?? ''}`)
      .sort();
    expect(documented).toEqual(registered);
  });
});
