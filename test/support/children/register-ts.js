'use strict';
// A require hook for the tests' child processes (`node -r ./test/support/children/register-ts.js
// child.ts`): TypeScript transpiled file by file as ts-node's transpile-only mode does (the
// project's tsconfig, no type checking), but kept on disk by content, so that only the first
// child after a change transpiles the library. Each child under ts-node spent 8 to 20 s of CPU
// transpiling the same few hundred files again; the suites start dozens of them.
//
// The cache key is the file's path and text, the tsconfig's text and TypeScript's version: an
// edit, a new compiler or new options never reuse an old output. Entries are written to a
// temporary name and renamed, so children starting together never read half a file.

const { createHash } = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const Module = require('node:module');

const ROOT = path.resolve(__dirname, '../../..');
const CACHE = path.join(ROOT, 'node_modules', '.cache', 'nestjs-outbox-test-children');
const TSCONFIG = path.join(ROOT, 'tsconfig.json');

// Read, not required: a required package.json would count as a package the child loaded.
const compilerVersion = JSON.parse(
  fs.readFileSync(require.resolve('typescript/package.json'), 'utf8'),
).version;
const salt = createHash('sha1')
  .update(compilerVersion)
  .update('\0')
  .update(fs.readFileSync(TSCONFIG, 'utf8'))
  .digest('hex');

/** Loaded only on a cache miss: requiring the compiler alone takes a second on a busy machine. */
let compile;
function transpiler() {
  if (compile !== undefined) return compile;
  const ts = require('typescript');
  const config = ts.readConfigFile(TSCONFIG, (p) => ts.sys.readFile(p));
  const { options } = ts.convertCompilerOptionsFromJson(config.config.compilerOptions, ROOT);
  const compilerOptions = {
    ...options,
    module: ts.ModuleKind.CommonJS,
    sourceMap: false,
    declaration: false,
    // The map's sources are the file itself, not a path from the build's outDir.
    outDir: undefined,
    rootDir: undefined,
    inlineSourceMap: true,
    inlineSources: true,
  };
  compile = (source, fileName) =>
    ts.transpileModule(source, { compilerOptions, fileName }).outputText;
  return compile;
}

// Stack traces name the TypeScript lines, as under ts-node.
process.setSourceMapsEnabled(true);

Module._extensions['.ts'] = function loadTypeScript(module, fileName) {
  const source = fs.readFileSync(fileName, 'utf8');
  const key = createHash('sha1').update(salt).update(fileName).update('\0').update(source);
  const cached = path.join(CACHE, `${key.digest('hex')}.js`);
  let output;
  try {
    output = fs.readFileSync(cached, 'utf8');
  } catch {
    output = transpiler()(source, fileName);
    fs.mkdirSync(CACHE, { recursive: true });
    const partial = `${cached}.${process.pid}.partial`;
    fs.writeFileSync(partial, output);
    fs.renameSync(partial, cached);
  }
  module._compile(output, fileName);
};
