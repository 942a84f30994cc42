/**
 * Versions of the services and the PostgreSQL settings the bench depends on (reachability is the
 * tests' canConnect, test/support/services.ts).
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { Client } from './pg';
import { SERVICES } from './config';
import { pgConfig } from './databases';
import { sleep } from '../../test/support/wait-for';

export async function pgQuery<T extends Record<string, unknown>>(
  sql: string,
  database?: string,
): Promise<T[]> {
  const client = new Client(pgConfig(database));
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

export interface PgSettings {
  readonly version: string;
  readonly walLevel: string;
  readonly statStatements: boolean;
}

export async function pgSettings(): Promise<PgSettings> {
  const [row] = await pgQuery<{ version: string; wal_level: string; preload: string }>(
    `SELECT current_setting('server_version') AS version, current_setting('wal_level') AS wal_level, current_setting('shared_preload_libraries') AS preload`,
  );
  return {
    version: row?.version ?? '?',
    walLevel: row?.wal_level ?? '?',
    statStatements: (row?.preload ?? '').includes('pg_stat_statements'),
  };
}

export const CONFIGURE_HINT =
  'Logical replication needs wal_level=logical. Run `npm run bench -- --configure-postgres` ' +
  '(ALTER SYSTEM SET wal_level = logical, adds pg_stat_statements to shared_preload_libraries, and restarts the ' +
  `cluster with pg_ctlcluster --skip-systemctl-redirect ${SERVICES.postgres.cluster} restart; this drops every open PostgreSQL connection).`;

/**
 * Sets wal_level = logical (and preloads pg_stat_statements for P8), then restarts the local
 * cluster. Interrupts every PostgreSQL client on the machine.
 */
export async function configurePostgres(log: (line: string) => void): Promise<void> {
  const before = await pgSettings();
  const [row] = await pgQuery<{ preload: string }>(
    `SELECT current_setting('shared_preload_libraries') AS preload`,
  );
  const preload = (row?.preload ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  await pgQuery(`ALTER SYSTEM SET wal_level = logical`);
  if (!preload.includes('pg_stat_statements')) {
    await pgQuery(
      `ALTER SYSTEM SET shared_preload_libraries = '${[...preload, 'pg_stat_statements'].join(',')}'`,
    );
  }
  const [version, name] = SERVICES.postgres.cluster.split(' ');
  log(`restarting PostgreSQL ${version}/${name} (wal_level was ${before.walLevel})`);
  execFileSync(
    'pg_ctlcluster',
    ['--skip-systemctl-redirect', version ?? '15', name ?? 'main', 'restart'],
    { stdio: 'inherit' },
  );
  for (let i = 0; i < 60; i++) {
    try {
      const after = await pgSettings();
      log(
        `PostgreSQL back: wal_level=${after.walLevel}, pg_stat_statements preloaded=${after.statStatements}`,
      );
      return;
    } catch {
      await sleep(500);
    }
  }
  throw new Error('PostgreSQL did not come back after the restart');
}

/** Kafka broker version from the running broker's class path (scripts/kafka.sh), if found. */
export function kafkaVersion(): string {
  try {
    for (const pid of readdirSync('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      let cmd = '';
      try {
        cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      } catch {
        continue;
      }
      if (!cmd.includes('kafka.Kafka')) continue;
      const jar =
        /kafka[_-][\w.-]*?(\d+\.\d+\.\d+)\.jar/.exec(cmd) ?? /kafka-(\d+\.\d+\.\d+)/.exec(cmd);
      if (jar !== null) return `${jar[1]} (KRaft, single node)`;
    }
  } catch {
    // not Linux
  }
  // Not running now (P2 starts it): the version scripts/kafka.sh runs.
  if (process.env.KAFKA_VERSION !== undefined)
    return `${process.env.KAFKA_VERSION} (KRaft, single node, via scripts/kafka.sh)`;
  try {
    const script = readFileSync(join(__dirname, '../../scripts/kafka.sh'), 'utf8');
    const version = /KAFKA_VERSION="\$\{KAFKA_VERSION:-([\d.]+)\}"/.exec(script)?.[1];
    if (version !== undefined) return `${version} (KRaft, single node, via scripts/kafka.sh)`;
  } catch {
    // no script
  }
  return 'unknown';
}

export function machine(): { cores: number; memoryGiB: number; cpu: string; node: string } {
  return {
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    cpu: cpus()[0]?.model ?? '?',
    node: process.version,
  };
}

/** Other jest processes on the machine (other engineers' test runs make numbers noisy). */
export function otherJestProcesses(): number {
  try {
    return execFileSync('pgrep', ['-f', 'jest'], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.trim() !== '' && Number(l) !== process.pid).length;
  } catch {
    return 0;
  }
}

/** The commit the library was measured at, its lib/ tree, and whether lib/ had uncommitted changes. */
export function libraryRevision(): { commit: string; libTree: string; libDirty: boolean } {
  try {
    const git = (...args: string[]): string =>
      execFileSync('git', args, { encoding: 'utf8' }).trim();
    return {
      commit: git('rev-parse', '--short', 'HEAD'),
      libTree: git('rev-parse', '--short', 'HEAD:lib'),
      libDirty: git('status', '--porcelain', '--', 'lib') !== '',
    };
  } catch {
    return { commit: 'unknown', libTree: 'unknown', libDirty: false };
  }
}
