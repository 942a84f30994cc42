import type { HttpServer } from '@nestjs/common';
import { OutboxOptionsError } from '../../errors/outbox-options.error';

const FORM = 'application/x-www-form-urlencoded';

/** The parts of a Fastify instance the check reads (the console does not depend on Fastify). */
interface FastifyLike {
  hasContentTypeParser?(contentType: string): boolean;
}

/**
 * Refuses to start a console whose actions could not be read: they post HTML forms, which Nest
 * parses on Express and Fastify alike unless the app was made with `bodyParser: false`. Fastify
 * would then answer every action with its own 415, so the app must register `@fastify/formbody`;
 * saying so at bootstrap beats a console that shows buttons that cannot work. (On Express the
 * parser cannot be seen from here; an action without a parsed form is a 400 saying the same.)
 */
export function checkFormBodyParser(http: HttpServer | undefined, path: string): void {
  if (http === undefined || http.getType() !== 'fastify') return;
  const fastify = http.getInstance() as FastifyLike;
  if (typeof fastify.hasContentTypeParser !== 'function') return;
  if (fastify.hasContentTypeParser(FORM)) return;
  throw new OutboxOptionsError(
    `OutboxConsoleModule at ${path}: this Fastify app parses no ${FORM} body (it was created with bodyParser: false), so the console's retry and purge forms could not be read. ` +
      "Register the parser before the app starts: import fastifyFormbody from '@fastify/formbody'; await app.register(fastifyFormbody); " +
      "or keep Nest's default bodyParser, or mount the console with readOnly: true.",
    'readOnly',
  );
}

/** Why an action's body is not a form, in words an operator can act on. */
export const MISSING_FORM =
  `the form did not reach the console: the app parses no ${FORM} body (created with bodyParser: false?); ` +
  "keep Nest's default body parser, or register one for forms (on Fastify, @fastify/formbody)";
