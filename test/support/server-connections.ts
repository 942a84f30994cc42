import { createConnection } from 'mysql2/promise';
import { serverConnection } from './databases';

// Ends, on the server, the connections opened since a point in time (a fixture's pools), as a
// failover, an idle timeout at a proxy or pg_terminate_backend would: the way to prove that a
// library's connection survives it. Only what was opened after `serverConnectionsSince` and
// never the watcher's own connection.

export interface ServerConnections {
  /** Ends every connection opened since; answers how many. */
  killNew(): Promise<number>;
  close(): Promise<void>;
}

// eslint-disable-next-line @typescript-eslint/no-require-imports
const pg = require('pg') as {
  Client: new (config: object) => {
    connect(): Promise<void>;
    query(text: string, values?: unknown[]): Promise<{ rows: { pid: number }[] }>;
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
    const listed = async (): Promise<number[]> =>
      (
        await client.query(
          `SELECT pid FROM pg_stat_activity
            WHERE datname = current_database() AND backend_type = 'client backend'
              AND pid <> pg_backend_pid()`,
        )
      ).rows.map((r) => Number(r.pid));
    const before = new Set(await listed());
    return {
      async killNew() {
        const fresh = (await listed()).filter((pid) => !before.has(pid));
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
  const listed = async (): Promise<number[]> => {
    const [rows] = await connection.query(
      `SELECT ID AS id FROM information_schema.PROCESSLIST
        WHERE ID <> CONNECTION_ID() AND USER = SUBSTRING_INDEX(USER(), '@', 1)`,
    );
    return (rows as { id: number }[]).map((r) => Number(r.id));
  };
  const before = new Set(await listed());
  return {
    async killNew() {
      const fresh = (await listed()).filter((id) => !before.has(id));
      for (const id of fresh) {
        // Gone already (closed by its pool meanwhile): nothing to end.
        await connection.query(`KILL CONNECTION ${Number(id)}`).catch(() => undefined);
      }
      return fresh.length;
    },
    close: () => connection.end(),
  };
}
