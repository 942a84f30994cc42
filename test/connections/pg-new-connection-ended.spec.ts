import { createServer, connect, type Server, type Socket } from 'node:net';
import { pgOutbox } from '../../lib/connections/pg';
import type { SqlPort } from '../../lib/store/ports/sql-port';
import { serverConnection } from '../support/databases';
import { describeWith } from '../support/services';
import type { PgPoolForTests } from './driver-targets';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const pg = require('pg') as { Pool: new (config: object) => PgPoolForTests };

// The server may end a connection the moment it is ready (pg_terminate_backend while the
// dispatcher reconnects, a failover): its FATAL then arrives in the same read as the
// ReadyForQuery that completes the connect. node-postgres hands the client over and goes on
// parsing that read at once, so the error is emitted before a promise's continuation could add
// a listener; a client with none ends the process. CI met it once in killed-connections.spec.

/** ReadyForQuery, idle: the end of the server's answer to a connect. */
const READY = Buffer.from([0x5a, 0, 0, 0, 5, 0x49]);

function terminating(): Buffer {
  const fields = Buffer.concat(
    [
      ['S', 'FATAL'],
      ['V', 'FATAL'],
      ['C', '57P01'],
      ['M', 'terminating connection due to administrator command'],
    ].map(([code, text]) => Buffer.from(`${code}${text}\0`, 'utf8')),
  );
  const body = Buffer.concat([fields, Buffer.from([0])]);
  const head = Buffer.alloc(5);
  head.write('E', 0, 'ascii');
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}

/**
 * Forwards to PostgreSQL, and ends every connection right after the server says it is ready,
 * the FATAL written with the ReadyForQuery in one write.
 */
async function endingAtReady(): Promise<{
  port: number;
  ended: () => number;
  close(): Promise<void>;
}> {
  const target = serverConnection('postgres');
  const sockets = new Set<Socket>();
  let ended = 0;
  const server: Server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    sockets.add(client).add(upstream);
    let seen = Buffer.alloc(0);
    let done = false;
    client.on('data', (chunk: Buffer) => upstream.write(chunk));
    upstream.on('data', (chunk: Buffer) => {
      if (done) return;
      seen = Buffer.concat([seen, chunk]);
      const at = seen.indexOf(READY);
      if (at < 0) return;
      done = true;
      ended += 1;
      client.end(Buffer.concat([seen.subarray(0, at + READY.length), terminating()]));
      upstream.destroy();
    });
    for (const socket of [client, upstream]) {
      socket.on('error', () => undefined);
      socket.on('close', () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return {
    port: address.port,
    ended: () => ended,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describeWith(['postgres'], 'pgOutbox: a connection the server ends as soon as it is ready', () => {
  const uncaught: unknown[] = [];
  const record = (error: unknown): void => {
    uncaught.push(error);
  };
  let proxy: Awaited<ReturnType<typeof endingAtReady>>;
  let pool: PgPoolForTests;
  let sql: SqlPort;

  beforeAll(async () => {
    process.on('uncaughtException', record);
    proxy = await endingAtReady();
    const c = serverConnection('postgres');
    // As docs/without-typeorm.md makes it: no 'error' listener of the app's on the pool.
    pool = new pg.Pool({
      host: '127.0.0.1',
      port: proxy.port,
      user: c.username,
      password: c.password,
      database: c.database,
    });
    sql = pgOutbox(pool).sql;
  });

  afterAll(async () => {
    process.removeListener('uncaughtException', record);
    await pool.end();
    await proxy.close();
  });

  beforeEach(() => {
    uncaught.length = 0;
  });

  const ways: ReadonlyArray<readonly [string, () => Promise<unknown>]> = [
    ['a transaction', () => sql.transaction((tx) => tx.query('SELECT 1'))],
    [
      'a named statement in a transaction of its own',
      () =>
        sql.transactionStatement!([], {
          name: 'outbox_ended_at_ready',
          text: 'SELECT 1',
          params: [],
          executed: 'EXECUTE outbox_ended_at_ready',
        }),
    ],
    [
      'a session (the owner lock)',
      async () => {
        const session = await sql.session!();
        try {
          return await session.query('SELECT 1');
        } finally {
          await session.release(true);
        }
      },
    ],
    [
      'LISTEN',
      () =>
        sql.listen!(
          'outbox_ended_at_ready',
          () => undefined,
          () => undefined,
        ),
    ],
    ['a pooled statement', () => sql.query('SELECT 1')],
  ];

  it.each(ways)(
    '%s fails with the server error; the process hears no unhandled one',
    async (_, use) => {
      const before = proxy.ended();
      await expect(use()).rejects.toThrow();
      // The connection was ended at its ready, not refused before it.
      expect(proxy.ended()).toBeGreaterThan(before);
      // Any late event of the ended socket is heard before this looks.
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(uncaught).toEqual([]);
    },
  );
});
