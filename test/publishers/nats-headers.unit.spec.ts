import { OutboxOptionsError } from '../../lib';
import { loadNatsHeaders } from '../../lib/publishers/microservices/nats-headers';

// ClientProxyPublisher sets the outbox headers on NATS messages with the header set of the NATS
// client package Nest loads: `@nats-io/transport-node` on Nest 12, `nats` on Nest 10 and 11. A
// `require('nats')` alone crashed every Nest 12 app at the publisher's construction.

function notFound(name: string): Error {
  return Object.assign(new Error(`Cannot find module '${name}'`), { code: 'MODULE_NOT_FOUND' });
}

describe('loadNatsHeaders', () => {
  it('uses nats when @nats-io/transport-node is not installed (Nest 10 and 11)', () => {
    const tried: string[] = [];
    const make = loadNatsHeaders((name) => {
      tried.push(name);
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      if (name === 'nats') return require('nats') as unknown;
      throw notFound(name);
    });
    const headers = make();
    headers.set('x-outbox-message-id', 'm-1');
    expect(tried).toEqual(['@nats-io/transport-node', 'nats']);
    expect((headers as unknown as { get(n: string): string }).get('x-outbox-message-id')).toBe(
      'm-1',
    );
  });

  it('uses @nats-io/transport-node when it is there (Nest 12), without touching nats', () => {
    const tried: string[] = [];
    const set = jest.fn();
    const make = loadNatsHeaders((name) => {
      tried.push(name);
      if (name === '@nats-io/transport-node') return { headers: () => ({ set }) };
      throw new Error('nats must not be loaded');
    });
    make().set('a', 'b');
    expect(tried).toEqual(['@nats-io/transport-node']);
    expect(set).toHaveBeenCalledWith('a', 'b');
  });

  it('fails with a typed error naming both packages when neither is installed', () => {
    const load = (name: string): never => {
      throw notFound(name);
    };
    expect(() => loadNatsHeaders(load)).toThrow(OutboxOptionsError);
    expect(() => loadNatsHeaders(load)).toThrow(/@nats-io\/transport-node.*nats/s);
  });

  it('passes on an error of a package that is there but fails to load', () => {
    const broken = notFound('@nats-io/nats-core'); // a missing dependency of the package
    expect(() =>
      loadNatsHeaders(() => {
        throw broken;
      }),
    ).toThrow(broken);
  });
});
