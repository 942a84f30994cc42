import { describeError } from '../../lib/internal/describe-error';
import { redactSecrets } from '../../lib/internal/redact-secrets';

// [input, secret text that must be gone, text that must remain]
const secrets: [string, string, string][] = [
  ['access_token=abc123 scope=read', 'abc123', 'access_token=*** scope=read'],
  ['client_secret=abc123&grant_type=x', 'abc123', 'client_secret=***&grant_type=x'],
  ['DB_PASSWORD=abc123 DB_USER=app', 'abc123', 'DB_PASSWORD=*** DB_USER=app'],
  ['PGPASSWORD=abc123 psql -h db', 'abc123', 'PGPASSWORD=*** psql -h db'],
  ['MYSQL_PWD=abc123', 'abc123', 'MYSQL_PWD=***'],
  ['SECRET_KEY_1=abc123', 'abc123', 'SECRET_KEY_1=***'],
  ['passwordValue: abc123', 'abc123', 'passwordValue: ***'],
  ['Authorization: Bearer abc.def', 'abc.def', 'Authorization: Bearer ***'],
  [
    'authorization: Basic dXNlcjpwdw== (refused)',
    'dXNlcjpwdw==',
    'authorization: Basic *** (refused)',
  ],
  ['Proxy-Authorization: abc123', 'abc123', 'Proxy-Authorization: ***'],
  [
    'Authorization: Digest username="app", response="6629fae4"\nnext line',
    '6629fae4',
    'Authorization: Digest ***\nnext line',
  ],
  ['{"Authorization":"Bearer abc.def"}', 'abc.def', '{"Authorization":"Bearer ***"}'],
  ['request had Bearer eyJhbGci.eyJzdWIi.c2ln', 'eyJhbGci', 'request had Bearer ***'],
  ['password="my secret pw" user=bob', 'secret', 'password="***" user=bob'],
  ["password: 'a b c', host: 'db'", 'a b c', "password: '***', host: 'db'"],
  ['{"password":"a b","user":"x"}', 'a b', '{"password":"***","user":"x"}'],
  ['{ "password" : "a \\" b" }', ' b', '{ "password" : "***" }'],
  [
    // JSON inside a JSON string, as describeError renders a non-Error object.
    '{"message":"rejected {\\"password\\":\\"a \\\\\\" b\\",\\"user\\":\\"x\\"}"}',
    ' b',
    '{"message":"rejected {\\"password\\":\\"***\\",\\"user\\":\\"x\\"}"}',
  ],
  ['amqp://user:p@ss@host:5672/vhost', 'p@ss', 'amqp://user:***@host:5672/vhost'],
  ['amqps://user:a@b@c@rabbit/vh failed', 'a@b@c', 'amqps://user:***@rabbit/vh failed'],
  ['redis://:s3cret@cache:6379', 's3cret', 'redis://:***@cache:6379'],
  [
    'mongodb://app:pw@h1:27017,h2:27017/db?authSource=admin',
    'pw@',
    'mongodb://app:***@h1:27017,h2:27017/db?authSource=admin',
  ],
  ['https://api.test/v1?access_token=abc123&page=2', 'abc123', 'access_token=***&page=2'],
  ['apikey=abc123', 'abc123', 'apikey=***'],
  ['api-key: abc123', 'abc123', 'api-key: ***'],
  ['x-api-key: abc123', 'abc123', 'x-api-key: ***'],
  ['sasl.password=abc123', 'abc123', 'sasl.password=***'],
  [
    "sasl: { mechanism: 'plain', username: 'app', password: 'abc123' }",
    'abc123',
    "username: 'app'",
  ],
  ['privateKey: abc123', 'abc123', 'privateKey: ***'],
  ['private_key=abc123', 'abc123', 'private_key=***'],
  ['credentials=abc123', 'abc123', 'credentials=***'],
  ['auth: "app:abc123"', 'abc123', 'auth: "***"'],
  ['Cookie: sid=abc123; theme=dark\nnext', 'abc123', 'Cookie: ***\nnext'],
  [
    'Server=db;User Id=sa;Password=my secret pw;Database=shop',
    'secret',
    'Server=db;User Id=sa;Password=***;Database=shop',
  ],
  ['Data Source=db;Pwd=abc 123;', 'abc', 'Data Source=db;Pwd=***;'],
  [
    '-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----',
    'MIIEpAIBAAKCAQEA',
    '-----BEGIN RSA PRIVATE KEY-----***-----END RSA PRIVATE KEY-----',
  ],
];

// Text without a secret in it comes out unchanged.
const harmless = [
  'tokens_total=5',
  'max_tokens: 100',
  'token_count=3',
  'password_length=12',
  'secretName=db-credentials-v2',
  'wrong password for user x',
  'password authentication failed for user "app"',
  "Access denied for user 'root'@'localhost' (using password: YES)",
  'Bearer token required',
  'connect ECONNREFUSED 127.0.0.1:5432',
  'http://rabbit:15672/api/queues?name=a@b',
  'amqp://guest@rabbit:5672/',
  'key=order-42 topic=orders',
  'mail ops@example.com about the outage',
  '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----',
];

describe('redactSecrets', () => {
  it.each(secrets)('masks the secret in %j', (input, secret, kept) => {
    const output = redactSecrets(input);
    expect(output).not.toContain(secret);
    expect(output).toContain(kept);
    // Redacting twice changes nothing: logs may pass text that was already redacted.
    expect(redactSecrets(output)).toBe(output);
  });

  it.each(harmless)('keeps %j as it is', (input) => {
    expect(redactSecrets(input)).toBe(input);
  });

  it('returns on adversarial input of 100 kB', () => {
    const inputs = [
      'password='.repeat(12_000),
      '"password":"'.repeat(9_000),
      'a://'.repeat(25_000),
      'a://:@'.repeat(17_000),
      'a://' + ':'.repeat(100_000),
      '\\'.repeat(100_000),
      'password="' + '\\'.repeat(100_000),
      'x'.repeat(100_000),
      'PASSWORD_1_'.repeat(10_000) + '=x',
      '-----BEGIN '.repeat(9_000),
      'Authorization: Bearer '.repeat(5_000),
      'Authorization: Digest '.repeat(5_000),
      'authorization:"Bearer x '.repeat(4_000),
      'Bearer '.repeat(15_000),
      'password' + ' '.repeat(100_000) + ':x',
      'Password=' + 'a '.repeat(50_000),
      'password=a ;'.repeat(9_000),
      'Cookie: '.repeat(12_000),
    ];
    for (const input of inputs) {
      expect(typeof redactSecrets(input)).toBe('string');
    }
  });
});

describe('describeError', () => {
  it('redacts the message of an error and of a non-Error value', () => {
    expect(describeError(new Error('connect amqp://app:p@ss@rabbit:5672/vh failed'))).toBe(
      'Error: connect amqp://app:***@rabbit:5672/vh failed',
    );
    expect(describeError({ code: 'E', password: 'a b' })).toBe('{"code":"E","password":"***"}');
  });

  it('describes the errors of an AggregateError, redacted', () => {
    const error = new AggregateError(
      [new Error('connect ECONNREFUSED ::1:5432'), new Error('token=abc123 rejected')],
      '',
    );
    expect(describeError(error)).toBe(
      'AggregateError (Error: connect ECONNREFUSED ::1:5432; Error: token=*** rejected)',
    );
  });
});
