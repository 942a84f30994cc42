import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { createConnection } from 'mysql2/promise';
import { serverConnection } from '../support/databases';
import { serverConnectionsSince } from '../support/server-connections';
import { describeWith } from '../support/services';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const pg = require('pg') as {
  Client: new (config: object) => {
    connect(): Promise<void>;
    query(text: string): Promise<unknown>;
    end(): Promise<void>;
    on(event: 'error', listener: (error: Error) => void): unknown;
  };
};

// The killed-connections fixture (test/support/server-connections.ts) ends the connections this
// process opened, never another process's: npm test runs two jest processes side by side on the
// same servers (scripts/test.sh), and other runs may share them too.

/** A process holding one connection: it answers `alive` or `dead` to each line it reads. */
const HOLDER = `
const database = process.argv[1];
const c = JSON.parse(process.argv[2]);
(async () => {
  let query;
  if (database === 'postgres') {
    const client = new (require('pg').Client)({ host: c.host, port: c.port, user: c.username, password: c.password, database: c.database });
    client.on('error', () => undefined);
    await client.connect();
    query = () => client.query('SELECT 1');
  } else {
    const connection = await require('mysql2/promise').createConnection({ host: c.host, port: c.port, user: c.username, password: c.password, database: c.database });
    connection.on('error', () => undefined);
    query = () => connection.query('SELECT 1');
  }
  console.log('ready');
  for await (const _ of require('node:readline').createInterface({ input: process.stdin })) {
    console.log(await query().then(() => 'alive', () => 'dead'));
  }
  process.exit(0);
})();
`;

for (const database of ['postgres', 'mariadb'] as const) {
  describeWith([database], `the killed-connections fixture on ${database}`, () => {
    it("ends this process's new connections and leaves another process's open", async () => {
      const c = serverConnection(database);
      const server = await serverConnectionsSince(database);
      const holder = spawn(process.execPath, ['-e', HOLDER, database, JSON.stringify(c)], {
        cwd: process.cwd(),
        stdio: ['pipe', 'pipe', 'inherit'],
      });
      const answers = createInterface({ input: holder.stdout })[Symbol.asyncIterator]();
      const own =
        database === 'postgres'
          ? new pg.Client({
              host: c.host,
              port: c.port,
              user: c.username,
              password: c.password,
              database: c.database,
            })
          : await createConnection({
              host: c.host,
              port: c.port,
              user: c.username,
              password: c.password,
              database: c.database,
            });
      own.on('error', () => undefined);
      try {
        if (own instanceof pg.Client) await own.connect();
        expect((await answers.next()).value).toBe('ready');

        expect(await server.killNew()).toBe(1);

        holder.stdin.write('\n');
        expect((await answers.next()).value).toBe('alive');
        await expect(own.query('SELECT 1')).rejects.toThrow();
      } finally {
        holder.stdin.end();
        await once(holder, 'exit');
        await own.end().catch(() => undefined);
        await server.close();
      }
    });
  });
}
