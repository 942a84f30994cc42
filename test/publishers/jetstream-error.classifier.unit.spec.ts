import { JetStreamApiError, JetStreamError } from '@nats-io/jetstream';
import * as transport from '@nats-io/transport-node';
import { natsSubjectProblem } from '../../lib/message/nats-subject';
import { classifyJetStreamError } from '../../lib/publishers/jetstream';

// The client's own error classes, as @nats-io/jetstream and @nats-io/transport-node throw them
// (their typings do not resolve under this project's module resolution, hence the cast).
const nats = transport as unknown as {
  errors: {
    RequestError: new (message?: string, options?: { cause?: unknown }) => Error;
    NoRespondersError: new (subject: string) => Error;
    TimeoutError: new () => Error;
    InvalidArgumentError: new (message: string) => Error;
    PermissionViolationError: new (
      message: string,
      operation: string,
      subject: string,
      queue?: string,
    ) => Error;
  };
};

const api = (err_code: number, code: number, description: string) =>
  new JetStreamApiError({ err_code, code, description });

describe('classifyJetStreamError', () => {
  it('tells each failure of a JetStream publish apart by class, err_code and status', () => {
    // As the client throws it (a JetStreamNotEnabled, not exported), around the request's error.
    const noResponders = new JetStreamError('jetstream is not enabled', {
      cause: new nats.errors.RequestError('no responders', {
        cause: new nats.errors.NoRespondersError('orders'),
      }),
    });
    expect(classifyJetStreamError(noResponders, false)).toBe('no-stream');
    expect(
      classifyJetStreamError(api(10054, 400, 'message size exceeds maximum allowed'), false),
    ).toBe('refused');
    expect(classifyJetStreamError(api(10060, 400, 'expected stream does not match'), false)).toBe(
      'refused',
    );
    expect(
      classifyJetStreamError(api(10008, 503, 'JetStream system temporarily unavailable'), false),
    ).toBe('unavailable');
    expect(classifyJetStreamError(api(10077, 400, 'maximum messages exceeded'), false)).toBe(
      'other',
    );
    expect(classifyJetStreamError(new nats.errors.TimeoutError(), false)).toBe('timeout');
    // A timeout on a connection that closed meanwhile: the connection is the news.
    expect(classifyJetStreamError(new nats.errors.TimeoutError(), true)).toBe('closed');
    expect(classifyJetStreamError(new nats.errors.RequestError('connection closed'), false)).toBe(
      'closed',
    );
    expect(
      classifyJetStreamError(
        new nats.errors.InvalidArgumentError("'payload' max_payload size exceeded"),
        false,
      ),
    ).toBe('unsendable');
    expect(
      classifyJetStreamError(
        new nats.errors.RequestError('permissions violation', {
          cause: new nats.errors.PermissionViolationError('denied', 'publish', 'orders'),
        }),
        false,
      ),
    ).toBe('other');
    expect(classifyJetStreamError(new Error('something else'), false)).toBe('other');
  });
});

describe('natsSubjectProblem', () => {
  it('accepts subjects to publish to and says what is wrong with the others', () => {
    for (const ok of ['orders', 'orders.eu.created', 'a-b_c.1', '$KV.bucket.key', 'Ünïcode.ok']) {
      expect(natsSubjectProblem(ok)).toBeUndefined();
    }
    expect(natsSubjectProblem('')).toMatch(/non-empty/);
    expect(natsSubjectProblem(42)).toMatch(/non-empty string/);
    expect(natsSubjectProblem('orders.*')).toMatch(/wildcards/);
    expect(natsSubjectProblem('orders.>')).toMatch(/wildcards/);
    expect(natsSubjectProblem('has space')).toMatch(/whitespace/);
    expect(natsSubjectProblem('tab\there')).toMatch(/control characters/);
    expect(natsSubjectProblem('a..b')).toMatch(/empty/);
    expect(natsSubjectProblem('.a')).toMatch(/empty/);
    expect(natsSubjectProblem('a.')).toMatch(/empty/);
    expect(natsSubjectProblem('$JS.API.STREAM.DELETE.X')).toMatch(/server's own/);
    expect(natsSubjectProblem('$SYS.REQ.SERVER.PING')).toMatch(/server's own/);
    expect(natsSubjectProblem('x'.repeat(1_025))).toMatch(/1024 UTF-8 bytes/);
  });
});
