import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createConnection } from 'mysql2/promise';
import { serverConnection } from './databases';

// Ends, on the server, the connections opened since a point in time (a fixture's pools), as a
// failover, an idle timeout at a proxy or pg_terminate_backend would: the way to prove that a
// library's connection survives it. Only what this process opened after `serverConnectionsSince`
// and never the watcher's own connection: another jest process of the run (scripts/test.sh runs
// two side by side), or anyone else's tests on the same server, keeps its connections.

/**
 * The local ports of this process's TCP sockets (the `client_port` the server sees), read from
 * /proc; undefined where there is none (not Linux), and then every new connection is ended.
 */
function ownClientPorts(): Set<number> | undefined {
  let fds: string[];
  try {
    fds = readdirSync('/proc/self/fd');
  } catch {
    return undefined;
  }
  const inodes = new Set<string>();
  for (const fd of fds) {
    try {
      const socket = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`));
      if (socket?.[1] !== undefined) inodes.add(socket[1]);
    } catch {
      // Closed since the listing.
    }
  }
  const ports = new Set<number>();
  for (const table of ['/proc/self/net/tcp', '/proc/self/net/tcp6']) {
    let lines: string[];
    try {
      lines = readFileSync(table, 'utf8').split('\n').slice(1);
    } catch {
      continue;
    }
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
    for (const line of lines) {
      const fields = line.trim().split(/\s+/);
      const port = fields[1]?.split(':')[1];
      if (port !== undefined && inodes.has(fields[9] ?? '')) ports.add(parseInt(port, 16));
    }
  }
  return ports;
}

/** The connections of `fresh` (server ids with their client's port) that this process holds. */
function ours<T extends { port: number }>(fresh: T[]): T[] {
  const own = ownClientPorts();
  return own === undefined ? fresh : fresh.filter((c) => own.has(c.port));
}

export interface ServerConnections {
  /** Ends every connection opened since; answers how many. */
  killNew(): Promise<number>;
  close(): Promise<void>;
}

// eslint-disable-next-line @typescript-eslint/no-require-imports
const pg = require('pg') as {
  Client: new (config: object) => {
    connect(): Promise<void>;
    query(text: string, values?: unknown[]): Promise<{ rows: { pid: number; port: number }[] }>;
    end(): Promise<void>;
    on(event: 'error', listener: (error: Error) => void): unknown;
  };
};

export async function serverConnectionsSince(
  database: 'postgres' | 'mariadb',
): Promise<ServerConnections> {
  const c = serverConnection(database);
  if (database === 'postgres') {
    const client = new pg.Client({
      host: c.host,
      port: c.port,
      user: c.username,
      password: c.password,
      database: c.database,
    });
    client.on('error', () => undefined);
    await client.connect();
    const listed = async (): Promise<{ id: number; port: number }[]> =>
      (
        await client.query(
          `SELECT pid, client_port AS port FROM pg_stat_activity
            WHERE datname = current_database() AND backend_type = 'client backend'
              AND pid <> pg_backend_pid()`,
        )
      ).rows.map((r) => ({ id: Number(r.pid), port: Number(r.port) }));
    const before = new Set((await listed()).map((c) => c.id));
    return {
      async killNew() {
        const fresh = ours((await listed()).filter((c) => !before.has(c.id))).map((c) => c.id);
        if (fresh.length > 0) {
          await client.query('SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [
            fresh,
          ]);
        }
        return fresh.length;
      },
      close: () => client.end(),
    };
  }
  const connection = await createConnection({
    host: c.host,
    port: c.port,
    user: c.username,
    password: c.password,
    database: c.database,
  });
  connection.on('error', () => undefined);
  // HOST is the client's address and port (`127.0.0.1:54321`).
  const listed = async (): Promise<{ id: number; port: number }[]> => {
    const [rows] = await connection.query(
      `SELECT ID AS id, HOST AS host FROM information_schema.PROCESSLIST
        WHERE ID <> CONNECTION_ID() AND USER = SUBSTRING_INDEX(USER(), '@', 1)`,
    );
    return (rows as { id: number; host: string }[]).map((r) => ({
      id: Number(r.id),
      port: Number(/:(\d+)$/.exec(r.host)?.[1] ?? -1),
    }));
  };
  const before = new Set((await listed()).map((c) => c.id));
  return {
    async killNew() {
      const fresh = ours((await listed()).filter((c) => !before.has(c.id))).map((c) => c.id);
      for (const id of fresh) {
        // Gone already (closed by its pool meanwhile): nothing to end.
        await connection.query(`KILL CONNECTION ${Number(id)}`).catch(() => undefined);
      }
      return fresh.length;
    },
    close: () => connection.end(),
  };
}
