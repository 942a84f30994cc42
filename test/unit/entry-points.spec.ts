import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

// entry-points.json is the one list of the package's entry points: package.json and
// tsconfig.json must agree with it (`npm run lint` checks the same), and an entry point left out
// of it, or a file left out of an entry point, is reported.

const root = join(__dirname, '..', '..');

/** problems() of scripts/entry-points.mjs for the list with `change` applied. */
function problemsWith(change: string): string[] {
  const script = `
    import { problems, readEntryPoints } from './scripts/entry-points.mjs';
    const entries = readEntryPoints();
    ${change}
    console.log(JSON.stringify(problems(entries)));`;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: root,
    encoding: 'utf8',
  });
  return JSON.parse(out) as string[];
}

describe('entry-points.json', () => {
  it('agrees with package.json exports and typesVersions and tsconfig.json paths', () => {
    expect(problemsWith('')).toEqual([]);
  });

  it('reports an entry point missing from the list everywhere it is still named', () => {
    const found = problemsWith(
      "entries.splice(entries.findIndex((e) => e.name === 'nestjs-outbox/cqrs'), 1);",
    );
    expect(found).toEqual([
      'lib/integrations/cqrs/index.ts is not an entry point of entry-points.json',
      'package.json "exports" differs from entry-points.json',
      'package.json "typesVersions" differs from entry-points.json',
      'tsconfig.json "paths" differs from entry-points.json',
    ]);
  });

  it('reports a source that does not exist and a peer package.json does not list as optional', () => {
    const found = problemsWith(
      "entries.push({ name: 'nestjs-outbox/nats', subpath: './nats', source: 'lib/publishers/nats/index.ts', peers: ['nats'] });",
    );
    expect(found.slice(0, 2)).toEqual([
      'nestjs-outbox/nats: its source lib/publishers/nats/index.ts does not exist',
      'nestjs-outbox/nats: its peer nats is not in package.json peerDependencies',
    ]);
  });
});
