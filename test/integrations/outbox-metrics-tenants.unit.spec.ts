import { Registry } from 'prom-client';
import { OUTBOX_HEADER_TENANT, OutboxOptionsError, type OutboxPublishedRecord } from '../../lib';
import { OutboxMetrics } from '../../lib/integrations/prometheus';

// The `tenant` label of the delivery counters (`tenantLabel`), bounded in cardinality.

const record = (topic: string, tenant?: string): OutboxPublishedRecord => ({
  id: '1',
  messageId: '0190a0b8-7c1e-7a2b-8c3d-4e5f60718293',
  topic,
  key: null,
  type: 'T',
  payload: '{}',
  headers: tenant === undefined ? {} : { [OUTBOX_HEADER_TENANT]: tenant },
  attempts: 1,
  createdAt: new Date(0),
  latencyMs: 5,
});

const lines = async (registry: Registry, metric: string): Promise<string[]> =>
  (await registry.metrics()).split('\n').filter((l) => l.startsWith(`${metric}{`));

describe('OutboxMetrics tenant label', () => {
  it('labels the published, retried and dead-lettered counters by tenant, past maxTenants as other', async () => {
    const registry = new Registry();
    const metrics = new OutboxMetrics({ registry, tenantLabel: { maxTenants: 2 } });
    metrics.onPublished([
      record('a', 't1'),
      record('a', 't1'),
      record('a', 't2'),
      record('a', 't3'),
      record('a', 't4'),
      record('a'),
    ]);
    metrics.onRetry(record('a', 't5'));
    metrics.onDeadLetter(record('b', 't2'));
    expect((await lines(registry, 'outbox_messages_published_total')).sort()).toEqual([
      'outbox_messages_published_total{topic="a",tenant=""} 1',
      'outbox_messages_published_total{topic="a",tenant="other"} 2',
      'outbox_messages_published_total{topic="a",tenant="t1"} 2',
      'outbox_messages_published_total{topic="a",tenant="t2"} 1',
    ]);
    expect(await lines(registry, 'outbox_messages_retried_total')).toEqual([
      'outbox_messages_retried_total{topic="a",tenant="other"} 1',
    ]);
    expect(await lines(registry, 'outbox_messages_dead_lettered_total')).toEqual([
      'outbox_messages_dead_lettered_total{topic="b",tenant="t2"} 1',
    ]);
  });

  it('has no tenant label by default, and refuses a bad bound', async () => {
    const registry = new Registry();
    new OutboxMetrics({ registry }).onPublished([record('a', 't1')]);
    expect(await lines(registry, 'outbox_messages_published_total')).toEqual([
      'outbox_messages_published_total{topic="a"} 1',
    ]);
    expect(
      () => new OutboxMetrics({ registry: new Registry(), tenantLabel: { maxTenants: 0 } }),
    ).toThrow(OutboxOptionsError);
  });
});
