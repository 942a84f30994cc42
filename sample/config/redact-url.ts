const SECRET_PARAM = /pass|secret|token|key|auth/i;

/**
 * A connection URL fit for logs: credentials become `***` and secret-looking query parameters are
 * masked. A string that does not parse is not echoed at all, since it may be a URL with a secret.
 */
export function redactUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return '<unparsable URL>';
  }
  if (parsed.username !== '' || parsed.password !== '') {
    parsed.username = '***';
    parsed.password = '';
  }
  for (const name of [...parsed.searchParams.keys()]) {
    if (SECRET_PARAM.test(name)) parsed.searchParams.set(name, '***');
  }
  return parsed.toString().replace(/%2A%2A%2A/g, '***');
}
