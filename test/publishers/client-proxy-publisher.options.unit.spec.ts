import { OutboxOptionsError } from '../../lib';
import { cloudEvents } from '../../lib/integrations/cloudevents';
import { ClientProxyPublisher, type OutboxClientProxy } from '../../lib/publishers/microservices';

// The options of ClientProxyPublisher are checked like the module's: a misspelt one is an error
// that names the option it likely meant, not a silently ignored key.

const client = {} as OutboxClientProxy;

describe('ClientProxyPublisher options', () => {
  it('rejects a misspelt option with the one it likely meant', () => {
    const create = () => new ClientProxyPublisher(client, { timeout: 1_000 } as never);
    expect(create).toThrow(OutboxOptionsError);
    expect(create).toThrow(/timeout.*did you mean.*timeoutMs/s);
  });

  it.each([
    [{ timeoutMs: 0 }, /timeoutMs/],
    [{ timeoutMs: 1.5 }, /timeoutMs/],
    [{ mode: 'publish' }, /mode/],
  ])('rejects %j', (options, message) => {
    expect(() => new ClientProxyPublisher(client, options as never)).toThrow(message);
  });

  // Nest's packet is the body on most transports: no CloudEvents binding could read it.
  it('refuses the cloudEvents option, saying why and which publishers send CloudEvents', () => {
    const create = () =>
      new ClientProxyPublisher(client, {
        cloudEvents: cloudEvents({ source: '/orders' }),
      } as never);
    expect(create).toThrow(OutboxOptionsError);
    expect(create).toThrow(
      /cloudEvents.*does not send CloudEvents.*\{ pattern, data \}.*RabbitMqPublisher.*SqsPublisher/s,
    );
  });

  it('accepts the documented options', () => {
    expect(
      () => new ClientProxyPublisher(client, { timeoutMs: 2_000, mode: 'send', closeClient: true }),
    ).not.toThrow();
  });
});
