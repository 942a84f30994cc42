import { describeError } from '../../lib/internal/describe-error';
import { redactSecrets } from '../../lib/internal/redact-secrets';

// [input, secret text that must be gone, text that must remain]
const secrets: [string, string, string][] = [
  ['access_token=abc123 scope=read', 'abc123', 'access_token=*** scope=read'],
  ['client_secret=abc123&grant_type=x', 'abc123', 'client_secret=***&grant_type=x'],
  ['DB_PASSWORD=abc123 DB_USER=app', 'abc123', 'DB_PASSWORD=*** DB_USER=app'],
  // An unquoted secret may hold blanks: what follows it on its line goes too, up to a next name.
  ['PGPASSWORD=abc123 psql -h db', 'psql', 'PGPASSWORD=***'],
  ['PGPASSWORD=abc123 PGUSER=app', 'abc123', 'PGPASSWORD=*** PGUSER=app'],
  ['MYSQL_PWD=abc123', 'abc123', 'MYSQL_PWD=***'],
  // Settings named like that kafkajs error are still secrets.
  ['KAFKAJS_API_KEY=abc123', 'abc123', 'KAFKAJS_API_KEY=***'],
  ['kafkaJsApiKey: abc123', 'abc123', 'kafkaJsApiKey: ***'],
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
  // Shapes an outside audit found leaking (issue 13, item 10).
  ['postgres://app:pa/ss@db:5432/shop', 'pa/ss', 'postgres://app:***@db:5432/shop'],
  ['postgres://app:pa#ss@db/shop', 'pa#ss', 'postgres://app:***@db/shop'],
  ['postgres://app:pa?ss@db/shop', 'pa?ss', 'postgres://app:***@db/shop'],
  ['postgres://app:pa\\ss@db/shop', 'pa\\ss', 'postgres://app:***@db/shop'],
  ['connect postgres://app:pa ss@db/shop failed', 'pa ss', 'postgres://app:***@db/shop failed'],
  // A user name holding `@` (Azure Database's `user@server` logins), which URL parsers and the
  // drivers accept unencoded.
  [
    'postgres://myadmin@myserver:Hunter2pw@db.example.com:5432/app',
    'Hunter2pw',
    'postgres://myadmin@myserver:***@db.example.com:5432/app',
  ],
  ['mysql://app@tenant:p@ss@h:3306/d failed', 'p@ss', 'mysql://app@tenant:***@h:3306/d failed'],
  ['postgres://a@b@c:pw9@[::1]:5432/db', 'pw9', 'postgres://a@b@c:***@[::1]:5432/db'],
  ['password=abc,def host=db', 'def', 'password=*** host=db'],
  ['password=abc)def', 'def', 'password=***'],
  ['password=abc def', 'def', 'password=***'],
  ['AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG', 'wJalrXUtnFEMI', 'AWS_SECRET_ACCESS_KEY=***'],
  ['{"SecretAccessKey":"wJalrXUtnFEMI"}', 'wJalrXUtnFEMI', '{"SecretAccessKey":"***"}'],
  [
    'DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFy==;EndpointSuffix=x',
    'Zm9vYmFy',
    'AccountName=acct;AccountKey=***;EndpointSuffix=x',
  ],
  ['Endpoint=sb://ns/;SharedAccessKey=Zm9vYmFy=;', 'Zm9vYmFy', 'SharedAccessKey=***;'],
  ['https://acct.blob/c?sv=2021&sig=Zm9vYmFy%2B&se=1', 'Zm9vYmFy', 'sig=***&se=1'],
  ['https://s3/o?X-Amz-Signature=abcdef0123&X-Amz-Date=1', 'abcdef0123', 'X-Amz-Signature=***&'],
  ['https://gcs/o?X-Goog-Signature=abcdef0123', 'abcdef0123', 'X-Goog-Signature=***'],
  ['Set-Cookie: JSESSIONID=abc123def; Path=/', 'abc123def', 'Set-Cookie: ***'],
  ['session JSESSIONID=abc123def; Path=/', 'abc123def', 'JSESSIONID=***; Path=/'],
  ['ERR wrong command: AUTH s3cr3t-pw', 's3cr3t-pw', 'AUTH ***'],
  ['AUTH default s3cr3t-pw', 's3cr3t-pw', 'AUTH ***'],
  ['mysql -u root -ps3cr3t-pw -h db', 's3cr3t-pw', 'mysql -u root -p*** -h db'],
  ['body: user=a&password%3Ds3cr3t%26next=1', 's3cr3t', 'password%3D***%26next=1'],
  [
    'token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl refused',
    'eyJzdWIiOiIxMjM0In0',
    'token *** refused',
  ],
  ['stripe said sk_live_51HqLyjWDarjtT1zdp7dc', 'sk_live_51HqLyj', 'stripe said ***'],
  ['push with ghp_16C7e42F292c6912E7710c838347Ae178B4a', 'ghp_16C7e42F', 'push with ***'],
  // Shapes a tester found leaking (issue 14, item 13).
  ['token abc123secret rejected', 'abc123secret', 'token *** rejected'],
  ['the access_token 5f3a9c1e2d was revoked', '5f3a9c1e2d', 'access_token *** was revoked'],
  ['Token dGhpc2lzYXZlcnlsb25nc2VjcmV0 refused', 'dGhpc2lzYXZlcn', 'Token *** refused'],
  ['password=\nhunter2 pw\nnext line', 'hunter2', 'password=\n***\nnext line'],
  ['DB_PASSWORD=\r\n  hunter2\r\nDB_USER=app', 'hunter2', 'DB_PASSWORD=\r\n  ***\r\nDB_USER=app'],
  ['password:\n  "hunter2 pw"\nuser: app', 'hunter2', 'password:\n  "***"\nuser: app'],
  ['key sk_live_4eC39HqLyj', '4eC39HqLyj', 'key ***'],
  ['sk_test_26PHem9AhJZvU623DfE1x4sd failed', '26PHem9AhJZvU623', '*** failed'],
  ['restricted rk_live_51HqLyjWD (revoked)', '51HqLyjWD', 'restricted *** (revoked)'],
  ['sent Basic dXNlcjpwYXNzd29yZA== to the proxy', 'dXNlcjpwYXNzd29yZA', 'sent Basic *** to the'],
  ['basic YXBwOmh1bnRlcjI', 'YXBwOmh1bnRlcjI', 'basic ***'],
  ['webhook whsec_MfKQ9r8GKYqrTwjU failed', 'MfKQ9r8GKYqrTwjU', 'webhook *** failed'],
];

// Text without a secret in it comes out unchanged.
const harmless = [
  // kafkajs' error for a server that refuses the request's API version, named like a key.
  'Kafka is unreachable: KafkaJSServerDoesNotSupportApiKey: The Kafka server does not support the requested API version',
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
  'postgres://app@tenant@db:5432/shop',
  'postgres://app@[::1]:5432/shop',
  'amqp://[::1]:5672/vh',
  'key=order-42 topic=orders',
  'mail ops@example.com about the outage',
  '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----',
  // A name with nothing after it on its line, then the next setting: nothing is swallowed.
  'DB_PASSWORD=\nDB_USER=app',
  'password:\n  file: /run/secrets/db',
  'password=\n\nnext paragraph',
  // Prose after a secret's name: words, not a credential.
  'token expired at noon',
  'invalid token provided',
  'CSRF token mismatch',
  'Unexpected token 1 in JSON at position 0',
  'Basic authentication failed for user app',
  'WWW-Authenticate: Basic realm="outbox"',
  'pk_live_51HqLyjWDarjtT1zdp7dc is a publishable key',
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
      'token '.repeat(16_000),
      'token x1'.repeat(12_000),
      'Basic '.repeat(16_000),
      'Basic ' + 'QUJD'.repeat(25_000),
      'password=\n'.repeat(9_000),
      'password:\n  a: '.repeat(6_000),
      'sk_live_'.repeat(12_000),
    ];
    for (const input of inputs) {
      expect(typeof redactSecrets(input)).toBe('string');
    }
  });
});

/** A small seeded generator, so that a failing case can be replayed from its seed. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

describe('redactSecrets on random secrets in random error texts', () => {
  // Characters a password may hold; quotes and line ends are left to the quoted shapes.
  const secretChars =
    'abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789!#$%*+/?@^_~()[],. \\';
  const quotedChars = secretChars.replace(/[\\ ]/g, '');
  const words = [
    'connect',
    'failed',
    'for',
    'user',
    'app',
    'at',
    'host',
    'db',
    'retry',
    'ETIMEDOUT',
    '(',
    ')',
    ':',
    '-',
    'in',
    '42',
    'ms',
  ];
  // Each shape writes the secret as it would appear, and says which text of it must not.
  type Shape = (s: string) => [text: string, written: string];
  const as =
    (write: (s: string) => string, clean: (s: string) => string = (s) => s): Shape =>
    (s) => [write(clean(s)), clean(s)];
  // Only what a token is made of, 8 characters or more with a digit (a short word, or one of
  // letters alone, reads as prose after "token").
  const token = (s: string): string => `${s.replace(/[^A-Za-z0-9]/g, '').padEnd(8, 'k')}7`;
  const base64 = (s: string): string => Buffer.from(`app:${s}`).toString('base64');
  const shapes: Shape[] = [
    as((s) => `password=${s}`),
    as((s) => `DB_PASSWORD=${s}`),
    as((s) => `postgres://app:${s}@db.internal:5432/shop`),
    as((s) => `amqp://guest:${s}@rabbit/vhost`),
    as((s) => `AWS_SECRET_ACCESS_KEY=${s}`),
    as((s) => `AUTH ${s}`),
    as(
      (s) => `mysql -u root -p${s}`,
      (s) => s.replace(/\s/g, ''),
    ),
    as(
      (s) => `password%3D${s}`,
      (s) => s.replace(/[%&\s]/g, 'x'),
    ),
    as((s) => `password=\n${s}`),
    as((s) => `DB_PASSWORD=\r\n  ${s}`),
    as((s) => `token ${s}`, token),
    as((s) => `access_token ${s}`, token),
    as((s) => `sk_live_${s}`, token),
    as((s) => `rk_test_${s}`, token),
    (s) => [`Basic ${base64(s)}`, base64(s)],
  ];
  const quotedShapes: Shape[] = [
    as((s) => `{"password":"${s}"}`),
    as((s) => `{"SecretAccessKey":"${s}"}`),
    as((s) => `password: '${s}'`),
    as((s) => `Authorization: "Bearer ${s}"`),
    as((s) => `password:\n  '${s}'`),
  ];

  it('never lets one of 3 000 random secrets through', () => {
    const random = seeded(20261123);
    const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)] as T;
    const text = (n: number): string => Array.from({ length: n }, () => pick(words)).join(' ');
    const secretOf = (chars: string): string => {
      // Starts and ends with a letter, so the secret cannot be mistaken for the text around it.
      const middle = Array.from({ length: 6 + Math.floor(random() * 18) }, () => pick([...chars]));
      return `Q${middle.join('')}Z`;
    };
    const leaks: string[] = [];
    for (let i = 0; i < 3_000; i++) {
      const quoted = random() < 0.3;
      const secret = secretOf(quoted ? quotedChars : secretChars);
      const [shape, written] = pick(quoted ? quotedShapes : shapes)(secret);
      const input = `${text(Math.floor(random() * 6))} ${shape}\n${text(Math.floor(random() * 6))}`;
      const output = redactSecrets(input);
      const probe = written.length > 8 ? written.slice(2, -2) : written;
      if (output.includes(probe))
        leaks.push(`${JSON.stringify(input)} -> ${JSON.stringify(output)}`);
    }
    expect(leaks.slice(0, 5)).toEqual([]);
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
      // What follows an unquoted secret on its line is masked with it (it may be its tail).
      'AggregateError (Error: connect ECONNREFUSED ::1:5432; Error: token=***',
    );
  });
});
