import type { HttpServer } from '@nestjs/common';
import type { Html } from './console-html';

const SECURITY_HEADERS: readonly [string, string][] = [
  // Only the console's own stylesheet and script; no inline script can run even if some text
  // escaped the escaping, no frame can embed the page, forms post only to this origin.
  [
    'Content-Security-Policy',
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  ],
  ['X-Content-Type-Options', 'nosniff'],
  ['X-Frame-Options', 'DENY'],
  // Nothing of the console's URLs (ids, filters) to other sites; its own posts then carry their
  // true Origin, where no-referrer makes a browser send Origin: null, which CSRF refuses.
  ['Referrer-Policy', 'same-origin'],
  ['Cache-Control', 'no-store'],
];

/** Writes the console's answers through the app's HTTP adapter (Express or Fastify alike). */
export class ConsoleResponder {
  constructor(private readonly http: () => HttpServer) {}

  page(response: unknown, status: number, page: Html): void {
    this.send(response, status, 'text/html; charset=utf-8', page.value);
  }

  asset(response: unknown, type: string, body: string): void {
    this.send(response, 200, `${type}; charset=utf-8`, body);
  }

  private send(response: unknown, status: number, type: string, body: string): void {
    const http = this.http();
    for (const [name, value] of SECURITY_HEADERS) http.setHeader(response, name, value);
    http.setHeader(response, 'Content-Type', type);
    http.status(response, status);
    http.reply(response, body, status);
  }
}
