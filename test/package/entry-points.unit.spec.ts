import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
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

describe('every entry point of entry-points.json', () => {
  const { entryPoints } = JSON.parse(readFileSync(join(root, 'entry-points.json'), 'utf8')) as {
    entryPoints: Record<string, { source: string }>;
  };
  const files = (dir: string, ext: RegExp): string[] =>
    readdirSync(join(root, dir), { recursive: true, encoding: 'utf8' })
      .filter((f) => ext.test(f))
      .map((f) => readFileSync(join(root, dir, f), 'utf8'));
  const docs = [...files('docs', /\.md$/), readFileSync(join(root, 'README.md'), 'utf8')].join(
    '\n',
  );
  const specs = files('test', /\.ts$/).join('\n');

  it.each(Object.entries(entryPoints))('%s is documented and imported by a test', (name, e) => {
    expect(docs).toContain(`'${name}'`);
    const folder = e.source.replace(/\/index\.ts$/, '');
    const imported =
      specs.includes(`'${name}'`) || specs.includes(`${folder}'`) || specs.includes(`${folder}/`);
    expect(imported).toBe(true);
  });
});
