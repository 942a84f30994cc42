import { PermanentPublishError } from '../../lib';
import { RecordingPublisher } from '../../lib/testing';
import { CONSOLE_TOKEN } from './console-app';

// HTTP helpers of the console specs: plain fetch, the way a browser or a script would call it.

export const auth: Record<string, string> = { authorization: `Bearer ${CONSOLE_TOKEN}` };
export const SCRIPT = '<script>document.title="pwned"</script>';

export async function get(
  url: string,
  headers: Record<string, string> = auth,
): Promise<{ status: number; body: string }> {
  const res = await fetch(url, { headers, redirect: 'manual' });
  return { status: res.status, body: squash(await res.text()) };
}

export async function post(
  url: string,
  form: [string, string][],
  headers: Record<string, string> = auth,
): Promise<{ status: number; body: string }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(form).toString(),
    redirect: 'manual',
  });
  return { status: res.status, body: squash(await res.text()) };
}

/** The page with the layout's whitespace taken out, so that assertions read the markup alone. */
export const squash = (body: string): string =>
  body.replace(/>\s+</g, '><').replace(/\s+>/g, '>').replace(/\s+/g, ' ');

export const tokenOf = (page: string): string =>
  /name="csrf" value="([^"]+)"/.exec(page)?.[1] ?? '';
export const countOf = (page: string, id: string): number =>
  Number(new RegExp(`id="${id}" data-count="(\\d+)"`).exec(page)?.[1] ?? NaN);

/** Dead letters: every message the publisher sees is rejected for good. */
export function rejectingPublisher(): RecordingPublisher {
  return new RecordingPublisher().fail(() => true, 'permanent', {
    error: new PermanentPublishError('schema v2 unknown'),
  });
}
