import { OutboxOptionsError } from '../../lib';
import { flagErrorOf } from '../../lib/operations/cli/cli-option-flags';
import { CliUsageError } from '../../lib/operations/cli/cli-usage.error';
import { runOutboxCli } from '../../lib/operations/cli/outbox-cli';
import { debeziumConnectorConfig } from '../../lib/store/schema/debezium-connector-config';

async function cli(
  argv: string[],
  env: Record<string, string | undefined>,
): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runOutboxCli(argv, env, {
    stdout: (text) => (stdout += text),
    stderr: (text) => (stderr += text),
  });
  return { code, stdout, stderr };
}

describe('outbox cdc debezium', () => {
  const env = { DATABASE_URL: 'postgres://app:s3cret@db.internal:6543/shop' };

  it('prints the connector for the table from DATABASE_URL, never its password', async () => {
    const { code, stdout } = await cli(
      ['cdc', 'debezium', '--connector', 'postgres', '--table', 'orders_outbox', '--schema', 'app'],
      env,
    );
    expect(code).toBe(0);
    expect(stdout).not.toContain('s3cret');
    const { name, config } = JSON.parse(stdout) as {
      name: string;
      config: Record<string, string>;
    };
    expect(name).toBe('outbox-orders_outbox');
    expect(config).toMatchObject({
      'database.hostname': 'db.internal',
      'database.port': '6543',
      'database.user': 'app',
      'database.dbname': 'shop',
      'table.include.list': 'app.orders_outbox',
      'transforms.outbox.route.by.field': 'topic',
    });
    expect(config['database.password']).toMatch(/^\$\{file:/);
  });

  it('takes the names and the start for a cut-over', async () => {
    const { code, stdout } = await cli(
      [
        'cdc',
        'debezium',
        '--connector',
        'mariadb',
        '--name',
        'orders',
        '--topic-prefix',
        'shop',
        '--start-with',
        'undelivered',
        '--bootstrap-servers',
        'kafka:9092',
        '--server-id',
        '42',
      ],
      { DATABASE_URL: 'mariadb://root@db:3306/shop' },
    );
    expect(code).toBe(0);
    const { name, config } = JSON.parse(stdout) as {
      name: string;
      config: Record<string, string>;
    };
    expect(name).toBe('orders');
    expect(config).toMatchObject({
      'connector.class': 'io.debezium.connector.mysql.MySqlConnector',
      'topic.prefix': 'shop',
      'snapshot.mode': 'initial',
      'database.server.id': '42',
      'schema.history.internal.kafka.bootstrap.servers': 'kafka:9092',
    });
  });

  it.each([
    [['cdc', 'debezium'], /--connector postgres, mysql or mariadb/],
    [['cdc', 'debezium', '--connector', 'oracle'], /--connector must be/],
    [['cdc', 'debezium', '--connector', 'postgres', '--start-with', 'all'], /--start-with/],
    [['cdc'], /needs a subcommand: debezium/],
    [['stats', '--delivery', 'kafka'], /--delivery must be poll .* or external/],
  ])('refuses %j', async (argv, message) => {
    const { code, stderr } = await cli(argv, env);
    expect(code).toBe(2);
    expect(stderr).toMatch(message);
  });

  it('needs DATABASE_URL for the connection details', async () => {
    const { code, stderr } = await cli(['cdc', 'debezium', '--connector', 'postgres'], {});
    expect(code).toBe(2);
    expect(stderr).toMatch(/Set DATABASE_URL/);
  });

  it('names the flag or DATABASE_URL for a refusal of the config builder the command line let through', () => {
    const refusal = (build: () => unknown): unknown => {
      try {
        build();
      } catch (error) {
        return error;
      }
      throw new Error('not refused');
    };
    const database = { hostname: 'db', port: 3306, user: 'root' };
    const cases: [() => unknown, RegExp][] = [
      [
        () =>
          debeziumConnectorConfig({
            connector: 'mysql',
            database: { ...database, dbname: 'shop' },
          }),
        /^--bootstrap-servers: the mysql connector keeps .* needs its brokers/,
      ],
      [
        () =>
          debeziumConnectorConfig({
            connector: 'mysql',
            database: { ...database, dbname: 'my-shop' },
            schemaHistoryBootstrapServers: 'kafka:9092',
          }),
        /^DATABASE_URL: "my-shop" is not a safe SQL identifier/,
      ],
      [
        () =>
          debeziumConnectorConfig({
            connector: 'postgres',
            database: { ...database, dbname: 'shop' },
            topicPrefix: 'a b',
          }),
        /^--topic-prefix: "a b" is not a valid topic prefix/,
      ],
    ];
    for (const [build, message] of cases) {
      const error = flagErrorOf(refusal(build));
      expect(error).toBeInstanceOf(CliUsageError);
      expect(error?.message).toMatch(message);
    }
    // Only options errors of options the command line fills.
    expect(
      flagErrorOf(new OutboxOptionsError('Invalid OutboxModule option "x": y.', 'x')),
    ).toBeNull();
    expect(flagErrorOf(new Error('tableName'))).toBeNull();
  });
});
