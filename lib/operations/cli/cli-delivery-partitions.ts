import type { OutboxAdmin } from '../../module/admin/outbox.admin';
import { formatDuration, plural, table } from './cli-output';

/** How many of the latest moves the text shows (`--json` has every partition's). */
const LATEST_MOVES = 10;

const iso = (date: Date | null): string => (date === null ? '-' : date.toISOString());

/**
 * `outbox delivery-partitions status`: who delivers the table under `dispatcher.claims:
 * 'partitions'` (each dispatcher process, its heartbeat, share and state), the latest moves,
 * or why delivery partitions are not in use. Not the time partitions of `outbox partitions`.
 */
export async function deliveryPartitionsStatus(
  admin: OutboxAdmin,
  tableName: string,
): Promise<{ text: string; json: unknown }> {
  const view = await admin.deliveryPartitions();
  if (!view.inUse) return { text: view.message, json: view };
  const holders = view.dispatchers.filter((d) => d.partitions > 0).length;
  const dispatchers = table(
    [
      'DISPATCHER',
      'INSTANCE ID',
      'STATE',
      'HEARTBEAT',
      'VALID',
      'PARTITIONS',
      'SHARE',
      'RANGES',
      'LAST TAKEN',
    ],
    view.dispatchers.map((d) => [
      d.id,
      d.instanceId ?? '-',
      d.state,
      d.heartbeatAgeMs === null ? '-' : `${formatDuration(d.heartbeatAgeMs)} ago`,
      formatDuration(d.validMs),
      String(d.partitions),
      `${Math.round(d.share * 1000) / 10}%`,
      d.ranges === '' ? '-' : d.ranges,
      iso(d.lastTakenAt),
    ]),
  );
  const latest = view.moves.latest.slice(0, LATEST_MOVES);
  const lines = [
    `Delivery partitions of ${tableName} (dispatcher.claims: 'partitions'): ${view.total}, ` +
      `held by ${plural(holders, 'dispatcher')}, ${view.unowned} free.`,
    dispatchers,
    '',
    view.moves.lastAt === null
      ? 'Moves: none yet.'
      : `Moves: ${plural(view.moves.total, 'take')} since the tables were made. The tables keep ` +
        `no history of moves, only each partition's generation (times taken) and its last move; ` +
        `the latest (every partition with --json):`,
    ...(latest.length === 0
      ? []
      : [
          table(
            ['AT', 'TO', 'PARTITIONS', 'RANGES'],
            latest.map((m) => [iso(m.at), m.owner ?? '(given up)', String(m.partitions), m.ranges]),
          ),
        ]),
  ];
  return { text: lines.join('\n'), json: view };
}
