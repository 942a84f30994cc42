import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

// nestjs-outbox/testing (with its fault kit) runs in a user's own test set-up, whatever their
// test runner and database library: importing it loads no test framework, no database driver or
// ORM and no optional peer. Checked in a fresh process, from what it required.

const root = join(__dirname, '..', '..');
/** Transpiles TypeScript for the child once per change (test/support/children/register-ts.js). */
const REGISTER_TS = join(root, 'test/support/children/register-ts.js');

/** The packages a process loads once it required `source` (none: only the loader's own). */
function packagesLoadedBy(source: string | undefined): string[] {
  const script = `
    ${source === undefined ? '' : `require(${JSON.stringify(join(root, source))});`}
    const found = new Set();
    for (const file of Object.keys(require.cache)) {
      const m = /node_modules\\/((?:@[^/]+\\/)?[^/]+)/.exec(file);
      if (m) found.add(m[1]);
    }
    console.log(JSON.stringify([...found]));`;
  const out = execFileSync(process.execPath, ['-r', REGISTER_TS, '-e', script], {
    cwd: root,
    encoding: 'utf8',
  });
  return JSON.parse(out) as string[];
}

describe('nestjs-outbox/testing at import', () => {
  const optionalPeers = execFileSync(process.execPath, ['scripts/entry-points.mjs', '--peers'], {
    cwd: root,
    encoding: 'utf8',
  })
    .split('\n')
    .filter((p) => p !== '');
  const forbidden = [
    ...optionalPeers,
    'jest',
    '@jest/globals',
    'typeorm',
    'pg',
    'mysql2',
    'better-sqlite3',
    'amqplib',
  ];

  it('loads no test framework, database library or optional peer', () => {
    const loaded = packagesLoadedBy('lib/testing/index.ts');
    expect(loaded).toContain('@nestjs/common');
    expect(loaded.filter((p) => forbidden.includes(p))).toEqual([]);
  }, 60_000);

  it('the fault kit alone loads no package at all', () => {
    // The loader's own packages (the compiler, on a cache miss), whatever the script requires.
    const loader = new Set(packagesLoadedBy(undefined));
    const loaded = packagesLoadedBy('lib/testing/fault-kit.ts').filter((p) => !loader.has(p));
    expect(loaded).toEqual([]);
  }, 60_000);
});
