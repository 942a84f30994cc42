import { outboxTableNames } from '../../lib/internal/sql-identifier';
import { postgresLogNames, postgresLogTailingDdl } from 'nestjs-outbox/log-tailing';
import { serverConnection } from './databases';
import type { OutboxScope } from './outbox-scope';
import { waitFor } from './wait-for';

// The PostgreSQL log specs' tables: each with its publication, its slot dropped once no reader
// holds it (an unread slot keeps WAL forever), and the server as a URL a proxy can stand in for.

const server = serverConnection('postgres');

/** The test server as a `postgres://` URL on `port` (the server's, or a proxy's). */
export function postgresServerUrl(port = server.port): string {
  const user = encodeURIComponent(server.username);
  const password = server.password ?? '';
  const auth = password === '' ? user : `${user}:${encodeURIComponent(password)}`;
  return `postgres://${auth}@127.0.0.1:${port}/${server.database}`;
}

export interface PostgresLogTables {
  /** The slot and publication `logTailing()` names for `table`. */
  names(table: string): { slot: string; publication: string };
  /** The slot's row in `pg_replication_slots` (undefined before a reader made it). */
  slotRow(table: string): Promise<{ active: boolean; active_pid: number | null } | undefined>;
  /**
   * A fresh outbox table (with its publication unless `bare`); its slot and publication are
   * dropped after the test, once no reader holds the slot.
   */
  tailedTable(prefix: string, bare?: boolean): Promise<string>;
}

export function postgresLogTables(scope: OutboxScope): PostgresLogTables {
  const names = (table: string) => postgresLogNames('public', table, server.database);
  const slotRow = async (table: string) => {
    const rows: { active: boolean; active_pid: number | null }[] = await scope.ds.query(
      'SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1',
      [names(table).slot],
    );
    return rows[0];
  };
  return {
    names,
    slotRow,
    async tailedTable(prefix, bare = false) {
      const table = await scope.table(prefix);
      const { slot, publication } = names(table);
      scope.defer(async () => {
        await waitFor(
          `slot ${slot} released`,
          async () => (await slotRow(table))?.active !== true,
          {
            timeoutMs: 15_000,
          },
        );
        await scope.ds.query(
          'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1',
          [slot],
        );
        await scope.ds.query(`DROP PUBLICATION IF EXISTS "${publication}"`);
      });
      if (!bare) {
        const ddl = postgresLogTailingDdl(outboxTableNames(table, null, 'double'), publication);
        for (const statement of ddl) await scope.ds.query(statement);
      }
      return table;
    },
  };
}
