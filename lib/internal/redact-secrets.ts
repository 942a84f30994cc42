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
];
// Short words that are only a secret on their own (not `bypass`, `compass`, `oauth`).
const SECRET_WORDS = new Set(['pw', 'pass', 'auth']);
// Suffixes that still name the secret itself (PASSWORD_RAW, tokenValue, SECRET_1), unlike
// password_length or tokens_total, which are harmless metrics and stay readable.
const SAME_SECRET_SUFFIXES = ['value', 'val', 'str', 'string', 'text', 'raw', 'plain', 'b64'];

type SecretKind = 'value' | 'authorization' | 'cookie' | 'bearer';

/** Removes credentials from text that may reach logs or the `last_error` column. */
export function redactSecrets(text: string): string {
  return redactNamedValues(redactPemKeys(redactUrlCredentials(text)));
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
 * `scheme://user:password@host` → `scheme://user:***@host`. The userinfo ends at the last `@`
 * of the authority, so a password containing `@` is masked whole.
 */
function redactUrlCredentials(text: string): string {
  let out = '';
  let copied = 0;
  let from = 0;
  for (;;) {
    const separator = text.indexOf('://', from);
    if (separator < 0) break;
    const start = separator + 3;
    let colon = -1;
    let at = -1;
    let end = start;
    for (; end < text.length; end++) {
      const c = text[end] as string;
      if (AUTHORITY_END.has(c)) break;
      if (c === ':' && colon < 0) colon = end;
      else if (c === '@') at = end;
    }
    from = end;
    if (at < 0 || colon < 0 || colon > at) continue;
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

function secretKind(name: string): SecretKind | undefined {
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
  if (last === 'bearer') return segments.length === 1 ? 'bearer' : undefined;
  if (SECRET_WORDS.has(last)) return 'value';
  // Joined, so that api-key, secret_key and DB_PASSWORD read like apikey, secretkey, password;
  // a camelCase tokenValue loses its suffix like token_value does.
  let joined = segments.join('');
  const same = SAME_SECRET_SUFFIXES.find((s) => joined.endsWith(s) && joined.length > s.length);
  if (same !== undefined) joined = joined.slice(0, -same.length);
  return SECRET_SUFFIXES.some((s) => joined.endsWith(s)) ? 'value' : undefined;
}

interface Span {
  start: number;
  end: number;
}

/**
 * Masks the value after a secret-looking name and `=` or `:`: `password=x`, `"password": "a b"`,
 * `DB_PASSWORD='x'`, `Password=a b;` (ADO-style), `Authorization: Bearer x` (keeping the
 * scheme), and a bare `Bearer <token>`. Prose such as "wrong password for user x" has no
 * separator after the name and is left alone.
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
    const value = kind === 'bearer' ? bearerToken(text, i) : namedValue(text, start, i, kind);
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
  const separator = text[j];
  if (separator !== '=' && separator !== ':') return undefined;
  j++;
  if (separator === '=' && text[j] === '>') j++;
  if (separator === ':' && text.startsWith('//', j)) return undefined;
  while (j < text.length && (text[j] === ' ' || text[j] === '\t')) j++;
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
  let end = j;
  while (end < text.length && !BARE_VALUE_END.has(text[end] as string)) end++;
  const value = text.slice(j, end);
  // MySQL's "Access denied … (using password: YES)" says whether one was sent, not what.
  if ((value === 'YES' || value === 'NO') && text.slice(nameStart - 6, nameStart) === 'using ') {
    return undefined;
  }
  return { start: j, end: separator === '=' ? adoValueEnd(text, end) : end };
}

// `Password=my secret;` in an ADO/ODBC connection string runs to the `;`. Looked for within a
// bounded distance, and only when no other `name=` comes first, so that prose after a plain
// `password=x` keeps its words and the scan stays linear.
function adoValueEnd(text: string, end: number): number {
  if (end >= text.length || text[end] === ';') return end;
  const limit = Math.min(text.length, end + 256);
  for (let k = end; k < limit; k++) {
    const c = text[k];
    if (c === ';') return k;
    if (c === '=' || c === '&' || c === '"' || c === "'" || c === '\n' || c === '\r') break;
  }
  return end;
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

// A bare `Bearer <token>` outside an Authorization header. "Bearer token required" stays: a
// token is taken to contain a non-letter or be at least 20 characters long.
function bearerToken(text: string, nameEnd: number): Span | undefined {
  if (text[nameEnd] !== ' ') return undefined;
  const start = nameEnd + 1;
  let end = start;
  let letters = true;
  while (end < text.length && /[A-Za-z0-9\-._~+/=]/.test(text[end] ?? '')) {
    if (!/[A-Za-z]/.test(text[end] ?? '')) letters = false;
    end++;
  }
  if (end === start || (letters && end - start < 20)) return undefined;
  return { start, end };
}
