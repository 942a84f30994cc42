import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { INestApplication } from '@nestjs/common';
import { bootstrap } from '../../sample/bootstrap';
import { SampleConfig, SampleConfigError } from '../../sample/config/sample.config';

// The sample's console (SQLite + TCP, no services): off without OUTBOX_CONSOLE_TOKEN; with it,
// open to `Authorization: Bearer <token>` and to a browser signed in through the login form's
// same-site cookie, and to no one else.

const TOKEN = 'e2e-console-token-0123456789';

async function start(
  env: Record<string, string>,
): Promise<{ app: INestApplication; url: string; dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-sample-console-'));
  const config = SampleConfig.fromEnv({
    PORT: '0',
    OUTBOX_TCP_PORT: '0',
    DATABASE_URL: `sqlite:${join(dir, 'sample.sqlite')}`,
    ...env,
  });
  const app = await bootstrap(config, { logger: ['error'] });
  const { port } = new URL(await app.getUrl());
  return { app, url: `http://127.0.0.1:${port}`, dir };
}

describe('the sample console', () => {
  it('is off when OUTBOX_CONSOLE_TOKEN is unset', async () => {
    const s = await start({});
    try {
      expect((await fetch(`${s.url}/outbox`)).status).toBe(404);
      expect((await fetch(`${s.url}/outbox-login`)).status).toBe(404);
      expect((await fetch(`${s.url}/outbox/stats`)).status).toBe(200);
    } finally {
      await s.app.close();
      rmSync(s.dir, { recursive: true, force: true });
    }
  });

  it('refuses a short token at startup', () => {
    expect(() => SampleConfig.fromEnv({ OUTBOX_CONSOLE_TOKEN: 'short' })).toThrow(
      SampleConfigError,
    );
  });

  describe('with OUTBOX_CONSOLE_TOKEN', () => {
    let s: Awaited<ReturnType<typeof start>>;
    beforeAll(async () => {
      s = await start({ OUTBOX_CONSOLE_TOKEN: TOKEN });
    });
    afterAll(async () => {
      await s?.app.close();
      rmSync(s.dir, { recursive: true, force: true });
    });

    it('refuses anonymous visitors and points them to the login form', async () => {
      const page = await fetch(`${s.url}/outbox/messages?status=dead`);
      expect(page.status).toBe(401);
      expect(await page.text()).toContain('href="/outbox-login"');
      const wrong = await fetch(`${s.url}/outbox`, { headers: { authorization: 'Bearer nope' } });
      expect(wrong.status).toBe(401);
    });

    it('serves Authorization: Bearer <token>', async () => {
      const page = await fetch(`${s.url}/outbox`, {
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      expect(page.status).toBe(200);
      const body = await page.text();
      expect(body).toContain('<h1>Backlog</h1>');
      expect(body).not.toContain(TOKEN);
    });

    it('signs a person in with the form: an HTTP-only, same-site cookie for /outbox', async () => {
      const login = (token: string) =>
        fetch(`${s.url}/outbox-login`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: new URLSearchParams({ token }).toString(),
          redirect: 'manual',
        });
      const refused = await login('not-the-token-at-all');
      expect(refused.status).toBe(401);
      expect(refused.headers.get('set-cookie')).toBeNull();

      const signedIn = await login(TOKEN);
      expect(signedIn.status).toBe(303);
      expect(signedIn.headers.get('location')).toBe('/outbox');
      const cookie = signedIn.headers.get('set-cookie') ?? '';
      expect(cookie).toMatch(
        /^outbox_console=[^;]+; Max-Age=\d+; Path=\/outbox; Expires=[^;]+; HttpOnly; SameSite=Strict$/,
      );
      expect(cookie).not.toContain(TOKEN);

      const page = await fetch(`${s.url}/outbox/audit`, {
        headers: { cookie: cookie.split(';')[0] ?? '' },
      });
      expect(page.status).toBe(200);
      const audit = await page.text();
      expect(audit).toContain('<h1>Audit log</h1>');
      // The sample keeps the audit log in a table of its database.
      expect(audit).toContain('from its audit table');
    });
  });
});
