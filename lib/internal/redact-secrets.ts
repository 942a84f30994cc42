// One redactor for everything that may reach a log line or the `last_error` column. It is a
// hand-written scanner rather than a few regular expressions: error text comes from drivers and
// brokers (sometimes echoing user input), and every loop below only moves forward, so a hostile
// string costs linear time instead of a backtracking blow-up.

const MASK = '***';

// A name whose last segment is, or ends with, one of these labels a secret: DB_PASSWORD,
// PGPASSWORD, client_secret, access_token, x-api-key, privateKey, sasl.password.
const SECRET_SUFFIXES = [
  'password',
  'passwd',
  'passphrase',
  'pwd',
  'secret',
  'token',
  'apikey',
  'privatekey',
  'secretkey',
  'signingkey',
  'encryptionkey',
  'credential',
  'credentials',
  // Cloud keys and signed-URL signatures: AWS_SECRET_ACCESS_KEY, "SecretAccessKey", Azure
  // AccountKey= / SharedAccessKey=, X-Amz-Signature=, X-Goog-Signature=.
  'accesskey',
  'accountkey',
  'signature',
  // Session identifiers are bearer credentials: JSESSIONID=, PHPSESSID=, session_id=.
  'sessionid',
  'sessid',
];
// Short words that are only a secret on their own (not `bypass`, `compass`, `oauth`).
const SECRET_WORDS = new Set(['pw', 'pass', 'auth', 'sig']);
// Suffixes that still name the secret itself (PASSWORD_RAW, tokenValue, SECRET_1), unlike
// password_length or tokens_total, which are harmless metrics and stay readable.
const SAME_SECRET_SUFFIXES = ['value', 'val', 'str', 'string', 'text', 'raw', 'plain', 'b64'];

type SecretKind = 'value' | 'token' | 'authorization' | 'cookie' | 'bearer' | 'basic';

/** Removes credentials from text that may reach logs or the `last_error` column. */
export function redactSecrets(text: string): string {
  return redactTokens(
    redactCommandSecrets(redactNamedValues(redactPemKeys(redactUrlCredentials(text)))),
  );
}

function isNameChar(c: string | undefined): boolean {
  return c !== undefined && /[\w.-]/.test(c);
}

function isLineEnd(c: string | undefined): boolean {
  return c === '\n' || c === '\r';
}

// Where an unquoted value ends. Not at `@`, `:`, `/` or `\`, which passwords do contain.
const BARE_VALUE_END = new Set([...' \t\n\r\v\f,;&"\'`<>)]}']);
// The authority of a URL ends at the first of `/?#` (WHATWG URL), and at a quote or space that
// ends a URL quoted in prose or JSON.
const AUTHORITY_END = new Set([...' \t\n\r\v\f/?#"\'`<>\\']);

/**
 * `scheme://user:password@host` → `scheme://user:***@host`. The password runs to the last `@`
 * followed by a host name on its line (and within 256 characters), so a password holding `@`,
 * `/`, `#`, `?`, `\\` or a space is masked whole; `host:5432/…` (digits, then the end of the
 * authority) is a port, not a password. The user name ends at the first `:`, not at an `@`:
 * `user@server:password@host` (Azure Database's logins, which drivers accept unencoded) has a
 * password too, and `user@host:5432` still reads as a port.
 */
function redactUrlCredentials(text: string): string {
  let out = '';
  let copied = 0;
  let from = 0;
  for (;;) {
    const separator = text.indexOf('://', from);
    if (separator < 0) break;
    const start = separator + 3;
    let colon = start;
    while (colon < text.length && !AUTHORITY_END.has(text[colon] as string)) {
      if (text[colon] === ':') break;
      colon++;
    }
    from = colon;
    if (text[colon] !== ':') continue;
    let port = colon + 1;
    while (port < text.length && /[0-9]/.test(text[port] as string)) port++;
    if (port > colon + 1 && (port === text.length || AUTHORITY_END.has(text[port] as string)))
      continue;
    const next = text.indexOf('://', colon);
    let limit = Math.min(text.length, colon + 257, next < 0 ? text.length : next);
    for (let k = colon + 1; k < limit; k++) {
      if (isLineEnd(text[k])) {
        limit = k;
        break;
      }
    }
    let at = -1;
    for (let k = colon + 1; k < limit; k++) {
      if (text[k] === '@' && /[A-Za-z0-9[]/.test(text[k + 1] ?? '')) at = k;
    }
    if (at < 0) continue;
    from = at;
    if (text.slice(colon + 1, at) === MASK) continue;
    out += text.slice(copied, colon + 1) + MASK;
    copied = at;
  }
  return copied === 0 ? text : out + text.slice(copied);
}

/** The body of a PEM private key (`-----BEGIN … PRIVATE KEY-----`), up to its END line. */
function redactPemKeys(text: string): string {
  const begin = '-----BEGIN ';
  let out = '';
  let copied = 0;
  let from = 0;
  for (;;) {
    const start = text.indexOf(begin, from);
    if (start < 0) break;
    const labelEnd = text.indexOf('-----', start + begin.length);
    if (labelEnd < 0) break;
    from = labelEnd + 5;
    if (!text.slice(start + begin.length, labelEnd).includes('PRIVATE KEY')) continue;
    const end = text.indexOf('-----END ', from);
    out += text.slice(copied, from) + MASK;
    copied = end < 0 ? text.length : end;
    if (end < 0) break;
    from = end;
  }
  return copied === 0 ? text : out + text.slice(copied);
}

// Error classes whose names end like a secret's, and are followed by their message in error
// text ("KafkaJSServerDoesNotSupportApiKey: The Kafka server does not support …"): exact names
// only, so that a setting named like one (KAFKAJS_API_KEY, kafkaApiKey) is still masked.
const NOT_SECRET_NAMES = new Set(['KafkaJSServerDoesNotSupportApiKey']);

function secretKind(name: string): SecretKind | undefined {
  if (NOT_SECRET_NAMES.has(name)) return undefined;
  const segments = name
    .toLowerCase()
    .split(/[_.-]+/)
    .filter((segment) => segment !== '');
  while (segments.length > 1) {
    const last = segments[segments.length - 1] as string;
    if (!/^\d+$/.test(last) && !SAME_SECRET_SUFFIXES.includes(last)) break;
    segments.pop();
  }
  const last = segments[segments.length - 1];
  if (last === undefined) return undefined;
  if (last === 'authorization' || last === 'cookie') return last;
  if (last === 'bearer' || last === 'basic') return segments.length === 1 ? last : undefined;
  if (SECRET_WORDS.has(last)) return 'value';
  // Joined, so that api-key, secret_key and DB_PASSWORD read like apikey, secretkey, password;
  // a camelCase tokenValue loses its suffix like token_value does.
  let joined = segments.join('');
  const same = SAME_SECRET_SUFFIXES.find((s) => joined.endsWith(s) && joined.length > s.length);
  if (same !== undefined) joined = joined.slice(0, -same.length);
  if (joined.endsWith('token')) return 'token';
  return SECRET_SUFFIXES.some((s) => joined.endsWith(s)) ? 'value' : undefined;
}

interface Span {
  start: number;
  end: number;
}

/**
 * Masks the value after a secret-looking name and `=` or `:`: `password=x`, `"password": "a b"`,
 * `DB_PASSWORD='x'`, `Password=a b;` (ADO-style), `Authorization: Bearer x` (keeping the
 * scheme), a value alone on the next line (`password:` then `  x`), a bare `Bearer <token>`,
 * `token <token>` and `Basic <base64 of user:password>`. Prose such as "wrong password for
 * user x" has no separator after the name and is left alone.
 */
function redactNamedValues(text: string): string {
  let out = '';
  let copied = 0;
  let i = 0;
  while (i < text.length) {
    if (!isNameChar(text[i])) {
      i++;
      continue;
    }
    const start = i;
    while (i < text.length && isNameChar(text[i])) i++;
    const kind = secretKind(text.slice(start, i));
    if (kind === undefined) continue;
    const value =
      kind === 'bearer'
        ? bearerToken(text, i)
        : kind === 'basic'
          ? basicCredentials(text, i)
          : namedValue(text, start, i, kind);
    if (value === undefined || value.end <= value.start) continue;
    out += text.slice(copied, value.start) + MASK;
    copied = value.end;
    i = value.end;
  }
  return copied === 0 ? text : out + text.slice(copied);
}

function namedValue(
  text: string,
  nameStart: number,
  nameEnd: number,
  kind: SecretKind,
): Span | undefined {
  let j = nameEnd;
  // The closing quote of a quoted name: "password": / 'password': / \"password\":
  while (text[j] === '\\') j++;
  if (text[j] === '"' || text[j] === "'") j++;
  while (j < text.length && (text[j] === ' ' || text[j] === '\t')) j++;
  let separator = text[j];
  // URL-encoded, as in a logged query string or form body: password%3Dx, token%3Ax.
  if (separator === '%' && /^%3[dDaA]/.test(text.slice(j, j + 3))) {
    separator = /^%3[dD]/.test(text.slice(j, j + 3)) ? '=' : ':';
    j += 2;
  }
  if (separator !== '=' && separator !== ':') {
    return kind === 'token' ? bearerToken(text, nameEnd, TOKEN_MIN_LENGTH) : undefined;
  }
  j++;
  if (separator === '=' && text[j] === '>') j++;
  if (separator === ':' && text.startsWith('//', j)) return undefined;
  while (j < text.length && (text[j] === ' ' || text[j] === '\t')) j++;
  if (isLineEnd(text[j])) {
    const next = nextLineValue(text, j);
    if (next === undefined) return undefined;
    j = next;
  }
  if (text.startsWith(MASK, j)) return undefined;

  let quote = j;
  while (text[quote] === '\\') quote++;
  const q = text[quote];
  if (q === '"' || q === "'") {
    const content = quote + 1;
    const end = closingQuote(text, content, q, quote - j);
    return kind === 'authorization' ? afterScheme(text, content, end) : { start: content, end };
  }
  if (q === '{' || q === '[') return undefined; // nested names are visited on their own

  if (kind === 'cookie') {
    let end = j;
    while (end < text.length && !isLineEnd(text[end]) && text[end] !== '"') end++;
    return { start: j, end };
  }
  if (kind === 'authorization') return afterScheme(text, j);
  let first = j;
  while (first < text.length && !BARE_VALUE_END.has(text[first] as string)) first++;
  const value = text.slice(j, first);
  // MySQL's "Access denied … (using password: YES)" says whether one was sent, not what.
  if ((value === 'YES' || value === 'NO') && text.slice(nameStart - 6, nameStart) === 'using ') {
    return undefined;
  }
  return { start: j, end: secretValueEnd(text, j) };
}

// Where a name ends its line (`password=`, a YAML `password:`), the value is the next line
// (its first character, after blanks), unless that line is empty, closes a structure or starts
// a setting of its own (`DB_USER=app`, `file: /run/secrets/x`): then the value was empty, and
// the next line is not swallowed.
function nextLineValue(text: string, lineEnd: number): number | undefined {
  let k = lineEnd + (text[lineEnd] === '\r' && text[lineEnd + 1] === '\n' ? 2 : 1);
  while (k < text.length && (text[k] === ' ' || text[k] === '\t')) k++;
  const first = text[k];
  if (first === undefined || isLineEnd(first) || NOT_A_VALUE_START.has(first)) return undefined;
  let m = k;
  while (m < text.length && m - k < 64 && /[A-Za-z0-9_.-]/.test(text[m] as string)) m++;
  const after = text[m];
  if (
    m > k &&
    (after === '=' ||
      (after === ':' && (m + 1 === text.length || /\s/.test(text[m + 1] as string))))
  ) {
    return undefined;
  }
  return k;
}
const NOT_A_VALUE_START = new Set([...',;&)]}>']);

// An unquoted secret may hold spaces, commas or parentheses, and nothing says where it ends:
// it is masked up to what surely follows it (the end of the line, a `;` or `&` separator, a
// quote, an encoded `&`) or the next `name=` / `name:`, so a password's tail never survives,
// at the cost of some prose after it.
const SECRET_VALUE_END = new Set([...'\n\r;&"\'`']);
function secretValueEnd(text: string, start: number): number {
  let k = start;
  while (k < text.length) {
    const c = text[k] as string;
    if (SECRET_VALUE_END.has(c)) return k;
    if (c === '%' && text.slice(k, k + 3).toUpperCase() === '%26') return k;
    if ((c === ' ' || c === '\t' || c === ',') && k > start && startsNextName(text, k)) return k;
    k++;
  }
  return k;
}

// At `k` (a space or comma), whether the text goes on with `name=` or `name: ` after blanks.
function startsNextName(text: string, k: number): boolean {
  let m = k;
  while (m < text.length && (text[m] === ' ' || text[m] === '\t' || text[m] === ',')) m++;
  const nameStart = m;
  while (m < text.length && m - nameStart < 64 && /[A-Za-z0-9_.-]/.test(text[m] as string)) m++;
  if (m === nameStart) return false;
  return text[m] === '=' || (text[m] === ':' && (text[m + 1] === ' ' || text[m + 1] === '\t'));
}

/**
 * Index where a quoted value starting at `from` ends. `escapes` is the number of backslashes
 * before its opening quote: 0 in plain text, 1 in JSON nested in a JSON string (`\"…\"`), 3 one
 * level deeper. A quote closes the value when the run of backslashes before it has that length
 * modulo 2·escapes + 2 (an escaped quote inside has escapes·2 + 1 of them). An unterminated value
 * is masked to the end of its line.
 */
function closingQuote(text: string, from: number, quote: string, escapes: number): number {
  let run = 0;
  for (let k = from; k < text.length; k++) {
    const c = text[k];
    if (c === quote && run % (2 * escapes + 2) === escapes) return k - escapes;
    if (c === '\n' || c === '\r') return k;
    run = c === '\\' ? run + 1 : 0;
  }
  return text.length;
}

// `Bearer abc` / `Basic abc` → keep the scheme so that the log still says which kind was
// refused. Digest credentials are a list of parameters: the rest of the line goes. `end` is the
// closing quote of a quoted value, whose whole rest is masked.
function afterScheme(text: string, start: number, end?: number): Span {
  const limit = end ?? text.length;
  let k = start;
  while (k < limit && /[A-Za-z0-9-]/.test(text[k] as string)) k++;
  if (k === start || k + 1 >= limit || text[k] !== ' ' || text[k + 1] === ' ') {
    return { start, end: end ?? bareEnd(text, start, limit) };
  }
  const credentials = k + 1;
  if (end !== undefined) return { start: credentials, end };
  if (text.slice(start, k).toLowerCase() !== 'digest') {
    return { start: credentials, end: bareEnd(text, credentials, limit) };
  }
  let lineEnd = credentials;
  while (lineEnd < text.length && !isLineEnd(text[lineEnd])) lineEnd++;
  return { start: credentials, end: lineEnd };
}

function bareEnd(text: string, start: number, limit: number): number {
  let k = start;
  while (k < limit && !BARE_VALUE_END.has(text[k] as string)) k++;
  return k;
}

// A credential after `token ` is at least this long, so that "Unexpected token 1 in JSON" stays.
const TOKEN_MIN_LENGTH = 8;

// A bare `Bearer <token>` outside an Authorization header, or `token <token>`. "Bearer token
// required" and "token expired" stay: a token is taken to contain a non-letter or be at least
// 20 characters long.
function bearerToken(text: string, nameEnd: number, minLength = 1): Span | undefined {
  if (text[nameEnd] !== ' ') return undefined;
  const start = nameEnd + 1;
  let end = start;
  let letters = true;
  while (end < text.length && /[A-Za-z0-9\-._~+/=]/.test(text[end] ?? '')) {
    if (!/[A-Za-z]/.test(text[end] ?? '')) letters = false;
    end++;
  }
  if (end - start < minLength || (letters && end - start < 20)) return undefined;
  return { start, end };
}

// A bare `Basic <credentials>` outside an Authorization header: masked only when the word after
// it is base64 of `user:password` (RFC 7617), so "Basic authentication failed" and
// `Basic realm="x"` stay.
function basicCredentials(text: string, nameEnd: number): Span | undefined {
  if (text[nameEnd] !== ' ') return undefined;
  const start = nameEnd + 1;
  let end = start;
  while (end < text.length && /[A-Za-z0-9+/]/.test(text[end] as string)) end++;
  const data = end - start;
  let padded = end;
  while (padded < text.length && padded - end < 2 && text[padded] === '=') padded++;
  if (data < 4 || (padded > end ? (padded - start) % 4 !== 0 : data % 4 === 1)) return undefined;
  const decoded = Buffer.from(text.slice(start, end), 'base64').toString('latin1');
  if (!decoded.includes(':') || [...decoded].some((c) => c < ' ' || c === '\x7f')) return undefined;
  return { start, end: padded };
}

/**
 * Secrets on command lines echoed into errors: Redis `AUTH [user] <password>` (the rest of the
 * line) and a MySQL client's `-p<password>` (up to the next blank).
 */
function redactCommandSecrets(text: string): string {
  let out = '';
  let copied = 0;
  for (let i = 0; i < text.length; i++) {
    const boundary = i === 0 || /[\s"'`([]/.test(text[i - 1] as string);
    if (!boundary) continue;
    if (text.startsWith('AUTH ', i)) {
      const start = i + 5;
      let end = start;
      while (end < text.length && !isLineEnd(text[end]) && !/["'`]/.test(text[end] as string))
        end++;
      if (end > start && text.slice(start, end).trim() !== MASK) {
        out += text.slice(copied, start) + MASK;
        copied = end;
        i = end;
      }
    } else if (text.startsWith('-p', i) && /[^\s-]/.test(text[i + 2] ?? ' ')) {
      const start = i + 2;
      let end = start;
      while (end < text.length && !/\s/.test(text[end] as string)) end++;
      if (text.slice(start, end) !== MASK) {
        out += text.slice(copied, start) + MASK;
        copied = end;
        i = end;
      }
    }
  }
  return copied === 0 ? text : out + text.slice(copied);
}

// Credentials recognisable by their shape alone: JSON Web Tokens, and API keys whose prefix
// names their issuer (Stripe, GitHub, GitLab, Slack, AWS access key ids). Stripe's secret,
// restricted and webhook-signing prefixes say "secret" alone, whatever the length after them;
// the others need 12 characters more, as no word of prose is that long after them.
const STRIPE_PREFIXES = ['sk_live_', 'sk_test_', 'rk_live_', 'rk_test_', 'whsec_'];
const TOKEN_PREFIXES = [
  'ghp_',
  'gho_',
  'ghu_',
  'ghs_',
  'ghr_',
  'github_pat_',
  'glpat-',
  'xoxb-',
  'xoxp-',
  'xoxa-',
  'xoxs-',
  'AKIA',
];

function isTokenChar(c: string | undefined): boolean {
  return c !== undefined && /[A-Za-z0-9_\-.]/.test(c);
}

function redactTokens(text: string): string {
  let out = '';
  let copied = 0;
  let i = 0;
  while (i < text.length) {
    if (!isTokenChar(text[i])) {
      i++;
      continue;
    }
    const start = i;
    while (i < text.length && isTokenChar(text[i])) i++;
    const word = text.slice(start, i);
    if (
      isJwt(word) ||
      STRIPE_PREFIXES.some((p) => word.startsWith(p) && word.length > p.length) ||
      TOKEN_PREFIXES.some((p) => word.startsWith(p) && word.length >= p.length + 12)
    ) {
      out += text.slice(copied, start) + MASK;
      copied = i;
    }
  }
  return copied === 0 ? text : out + text.slice(copied);
}

// header.payload.signature, each base64url; the header of every JWT starts with `{"` → `eyJ`.
function isJwt(word: string): boolean {
  const parts = word.split('.');
  return (
    parts.length === 3 &&
    (parts[0] ?? '').startsWith('eyJ') &&
    (parts[1] ?? '').length >= 4 &&
    parts.every((part) => /^[A-Za-z0-9_-]*$/.test(part))
  );
}
