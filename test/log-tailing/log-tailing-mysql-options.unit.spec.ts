import { OutboxOptionsError } from '../../lib/errors/outbox-options.error';
import { outboxTableNames } from '../../lib/internal/sql-identifier';
import { logTailing, type BinlogClientClass } from '../../lib/log-tailing';
import type { OutboxLogSourceContext } from '../../lib/store/ports/outbox-log-source.port';
import type { SqlPort } from '../../lib/store/ports/sql-port';

// How logTailing() builds the MySQL/MariaDB binlog source from its options and the instance's
// connection settings. The login is proven by where check() tries to connect: port 1 on the
// loopback refuses at once, and the error names the login it tried (never the password).

const sql: SqlPort = {
  query: () => Promise.reject(new Error('no database in this test')),
} as unknown as SqlPort;
const unusedClient = class {} as unknown as BinlogClientClass;

function context(connection?: OutboxLogSourceContext['connection']): OutboxLogSourceContext {
  return {
    database: 'mysql',
    // A schema given: the source does not ask the database for its name.
    names: outboxTableNames('outbox', 'shop', 'backtick'),
    sql,
    owner: 'test',
    connection,
  };
}

async function checkError(
  observer: ReturnType<typeof logTailing>,
  ctx: OutboxLogSourceContext,
): Promise<Error> {
  const source = observer.create(ctx);
  return source.check().then(
    () => {
      throw new Error('check() passed without a server');
    },
    (error: Error) => error,
  );
}

describe('logTailing() on MySQL/MariaDB', () => {
  it('logs in with the user, host and port of a mysql:// connectionString, never showing its password', async () => {
    const error = await checkError(
      logTailing({
        connectionString: 'mysql://binlog%2Bops:s3cr%3At@127.0.0.1:1/shop',
        binlogClient: unusedClient,
      }),
      context({ host: 'db.example', user: 'app', password: 'app-pw' }),
    );
    expect(error).toBeInstanceOf(OutboxOptionsError);
    expect(error.message).toContain('binlog+ops@127.0.0.1:1');
    expect(error.message).not.toContain('s3cr');
  });

  it("falls back to the DataSource's host, port and username", async () => {
    const error = await checkError(
      logTailing({ binlogClient: unusedClient }),
      context({ host: '127.0.0.1', port: 1, user: 'app', password: 'app-pw' }),
    );
    expect(error.message).toContain('app@127.0.0.1:1');
    expect(error.message).not.toContain('app-pw');
  });

  it("reads the DataSource's url before its host", async () => {
    const error = await checkError(
      logTailing({ binlogClient: unusedClient }),
      context({ connectionString: 'mariadb://svc:pw@127.0.0.1:1/shop', host: 'elsewhere' }),
    );
    expect(error.message).toContain('svc@127.0.0.1:1');
  });

  it('without a connection string or the settings of a DataSource, says to pass connectionString', () => {
    expect(() => logTailing().create(context())).toThrow(
      expect.objectContaining({
        option: 'delivery.connectionString',
        message: expect.stringContaining("logTailing({ connectionString: 'mysql://"),
      }) as Error,
    );
  });

  it('refuses a connectionString that is not a MySQL URL with a user, without quoting it', () => {
    for (const url of ['postgres://u:topsecret@h/db', 'mysql://h:3306/db', 'not a url topsecret']) {
      let thrown: unknown;
      try {
        logTailing({ connectionString: url }).create(context());
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(OutboxOptionsError);
      expect((thrown as Error).message).toContain('is not a MySQL URL');
      expect((thrown as Error).message).not.toContain('topsecret');
    }
  });

  it("refuses PostgreSQL's slotName and publicationName", () => {
    const own = { host: '127.0.0.1', user: 'app' };
    expect(() => logTailing({ slotName: 'outbox_slot' }).create(context(own))).toThrow(
      /logTailing\(\{ slotName \}\) is for PostgreSQL/,
    );
    expect(() => logTailing({ publicationName: 'outbox_pub' }).create(context(own))).toThrow(
      /logTailing\(\{ publicationName \}\) is for PostgreSQL/,
    );
  });

  it('refuses a serverId that is not a positive whole number', () => {
    expect(() => logTailing({ serverId: 0 })).toThrow(OutboxOptionsError);
    expect(() => logTailing({ serverId: 1.5 })).toThrow(/serverId/);
  });

  it('refuses a maxTransactionInserts that is not a positive whole number, naming it', () => {
    expect(() => logTailing({ maxTransactionInserts: 0 })).toThrow(OutboxOptionsError);
    expect(() => logTailing({ maxTransactionInserts: 2.5 })).toThrow(
      /logTailing\(\{ maxTransactionInserts \}\): 2.5 is not a positive whole number/,
    );
  });

  it('refuses a readerTimeoutMs that is not a positive whole number', () => {
    expect(() => logTailing({ readerTimeoutMs: 0 })).toThrow(OutboxOptionsError);
    expect(() => logTailing({ readerTimeoutMs: 2.5 })).toThrow(/readerTimeoutMs/);
  });
});
