// The event-bus bridges are optional: the core and nestjs-outbox/cls (guardOutboxWrites and
// fromClsTransactionHost) load without @nestjs/cqrs, @nestjs/event-emitter or @nestjs-cls/*, and
// each bridge subpath loads its own library only.

const BRIDGE_PACKAGES = [
  '@nestjs/cqrs',
  '@nestjs/event-emitter',
  'eventemitter2',
  'nestjs-cls',
  '@nestjs-cls/transactional',
] as const;

function refuseToLoad(names: readonly string[]): void {
  for (const name of names) {
    jest.doMock(name, () => {
      throw new Error(`${name} was loaded`);
    });
  }
}

describe('bridge subpaths load only what they must', () => {
  afterEach(() => {
    for (const name of BRIDGE_PACKAGES) jest.dontMock(name);
  });

  it('the core loads while no bridge library can be loaded', () => {
    jest.isolateModules(() => {
      refuseToLoad(BRIDGE_PACKAGES);
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const core = require('../../lib') as Record<string, unknown>;
      expect(typeof core.OutboxModule).toBe('function');
    });
  });

  it('lib/integrations/cls loads while no bridge library can be loaded', () => {
    jest.isolateModules(() => {
      refuseToLoad(BRIDGE_PACKAGES);
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const subpath = require('../../lib/integrations/cls') as Record<string, unknown>;
      expect(typeof subpath.guardOutboxWrites).toBe('function');
      expect(typeof subpath.fromClsTransactionHost).toBe('function');
    });
  });

  it('lib/integrations/cqrs loads without @nestjs/event-emitter or nestjs-cls', () => {
    jest.isolateModules(() => {
      refuseToLoad(BRIDGE_PACKAGES.filter((name) => name !== '@nestjs/cqrs'));
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const subpath = require('../../lib/integrations/cqrs') as Record<string, unknown>;
      expect(typeof subpath.OutboxCqrsModule).toBe('function');
    });
  });

  it('lib/integrations/event-emitter loads without @nestjs/cqrs or nestjs-cls', () => {
    jest.isolateModules(() => {
      refuseToLoad(['@nestjs/cqrs', 'nestjs-cls', '@nestjs-cls/transactional']);
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const subpath = require('../../lib/integrations/event-emitter') as Record<string, unknown>;
      expect(typeof subpath.OutboxEventEmitterModule).toBe('function');
    });
  });
});
