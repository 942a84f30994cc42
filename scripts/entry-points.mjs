// The package's entry points come from one list, entry-points.json. From it this script makes (with
// --write) or checks (the default, run by `npm run lint`) what must name every entry point:
// package.json "exports" and "typesVersions", and tsconfig.json "paths". jest.config.js and the
// pack smoke read the list themselves; scripts/build-esm-entries.mjs follows "exports".
//
//   node scripts/entry-points.mjs            check; exits 1 saying what disagrees and how to fix it
//   node scripts/entry-points.mjs --write    rewrite package.json and tsconfig.json from the list
//   node scripts/entry-points.mjs --names    the entry point names, one a line
//   node scripts/entry-points.mjs --peers    the optional peers the entry points load, one a line
//   node scripts/entry-points.mjs --count    the names each entry point exports (types included,
//                                            as the TypeScript compiler sees the source), and all
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, relative, resolve } from 'node:path';

const root = resolve(import.meta.dirname, '..');
const PACKAGE = 'nestjs-outbox';

export function readEntryPoints() {
  const { entryPoints } = JSON.parse(readFileSync(join(root, 'entry-points.json'), 'utf8'));
  return Object.entries(entryPoints).map(([name, entry]) => ({
    name,
    subpath: name === PACKAGE ? '.' : `./${name.slice(PACKAGE.length + 1)}`,
    source: entry.source,
    peers: entry.peers,
  }));
}

const built = (source, dir, ext) =>
  `./${source.replace(/^lib\//, `dist/${dir}/`).replace(/\.ts$/, ext)}`;

export function expectedExports(entries) {
  const exports = {};
  for (const { subpath, source } of entries) {
    exports[subpath] = {
      import: { types: built(source, 'esm', '.d.mts'), default: built(source, 'esm', '.mjs') },
      require: { types: built(source, 'cjs', '.d.ts'), default: built(source, 'cjs', '.js') },
    };
  }
  exports['./package.json'] = './package.json';
  return exports;
}

export function expectedTypesVersions(entries) {
  const map = {};
  for (const { subpath, source } of entries) {
    if (subpath === '.') continue;
    map[subpath.slice(2)] = [built(source, 'cjs', '.d.ts').slice(2)];
  }
  return { '*': map };
}

export function expectedPaths(entries) {
  return Object.fromEntries(entries.map(({ name, source }) => [name, [source]]));
}

/** tsconfig.json has comments: its "paths" object is read and replaced as text. */
const PATHS = /("paths": )(\{[^}]*\})/;

function tsconfigPaths(text) {
  const match = PATHS.exec(text);
  if (match === null) throw new Error('tsconfig.json: no "paths" object');
  return JSON.parse(match[2]);
}

function pathsText(paths, indent) {
  const lines = Object.entries(paths).map(
    ([name, targets]) => `${indent}  ${JSON.stringify(name)}: ${JSON.stringify(targets)}`,
  );
  return `{\n${lines.join(',\n')}\n${indent}}`;
}

function indexFiles(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return indexFiles(path);
    return entry.name === 'index.ts' ? [relative(root, path)] : [];
  });
}

export function problems(entries = readEntryPoints()) {
  const found = [];
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  const tsconfig = readFileSync(join(root, 'tsconfig.json'), 'utf8');
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  for (const { name, source, peers } of entries) {
    if (!existsSync(join(root, source))) found.push(`${name}: its source ${source} does not exist`);
    for (const peer of peers) {
      if (pkg.peerDependencies?.[peer] === undefined) {
        found.push(`${name}: its peer ${peer} is not in package.json peerDependencies`);
      } else if (pkg.peerDependenciesMeta?.[peer]?.optional !== true) {
        found.push(`${name}: its peer ${peer} is not optional in peerDependenciesMeta`);
      }
    }
  }
  // An index.ts under lib/ is a public surface: it is an entry point, or it is not there.
  const sources = new Set(entries.map((e) => e.source));
  for (const file of indexFiles(join(root, 'lib'))) {
    if (!sources.has(file)) found.push(`${file} is not an entry point of entry-points.json`);
  }
  if (!same(pkg.exports, expectedExports(entries))) {
    found.push('package.json "exports" differs from entry-points.json');
  }
  if (!same(pkg.typesVersions, expectedTypesVersions(entries))) {
    found.push('package.json "typesVersions" differs from entry-points.json');
  }
  if (!same(tsconfigPaths(tsconfig), expectedPaths(entries))) {
    found.push('tsconfig.json "paths" differs from entry-points.json');
  }
  return found;
}

/** How many names each entry point exports, values and types alike, read from its source. */
export function exportCounts(entries) {
  const ts = createRequire(import.meta.url)('typescript');
  const program = ts.createProgram(
    entries.map((e) => join(root, e.source)),
    { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, noEmit: true },
  );
  const checker = program.getTypeChecker();
  return entries.map(({ name, source }) => {
    const module = checker.getSymbolAtLocation(program.getSourceFile(join(root, source)));
    return { name, count: checker.getExportsOfModule(module).length };
  });
}

function write(entries) {
  const pkgFile = join(root, 'package.json');
  const pkg = JSON.parse(readFileSync(pkgFile, 'utf8'));
  pkg.exports = expectedExports(entries);
  pkg.typesVersions = expectedTypesVersions(entries);
  writeFileSync(pkgFile, `${JSON.stringify(pkg, null, 2)}\n`);
  const tsFile = join(root, 'tsconfig.json');
  const text = readFileSync(tsFile, 'utf8');
  const indent = /\n( *)"paths": /.exec(text)?.[1] ?? '    ';
  writeFileSync(
    tsFile,
    text.replace(PATHS, (_, key) => `${key}${pathsText(expectedPaths(entries), indent)}`),
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const entries = readEntryPoints();
  const flag = process.argv[2];
  if (flag === '--names') {
    console.log(entries.map((e) => e.name).join('\n'));
  } else if (flag === '--peers') {
    console.log([...new Set(entries.flatMap((e) => e.peers))].join('\n'));
  } else if (flag === '--count') {
    const counts = exportCounts(entries);
    for (const { name, count } of counts) console.log(`${String(count).padStart(4)}  ${name}`);
    console.log(`${String(counts.reduce((sum, c) => sum + c.count, 0)).padStart(4)}  all entry points`);
  } else if (flag === '--write') {
    write(entries);
    const left = problems(entries);
    if (left.length > 0) {
      console.error(left.join('\n'));
      process.exit(1);
    }
    console.log(`entry-points: package.json and tsconfig.json written for ${entries.length} entry points`);
  } else {
    const found = problems(entries);
    if (found.length > 0) {
      console.error(
        `entry-points: ${found.join('\n')}\n` +
          'Edit entry-points.json (the one list), then run node scripts/entry-points.mjs --write.',
      );
      process.exit(1);
    }
    console.log(`entry-points: ${entries.length} entry points agree`);
  }
}
