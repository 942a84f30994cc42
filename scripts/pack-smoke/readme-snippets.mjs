// Writes the documentation's whole-file snippets into an app's source folder, unedited: the
// ```ts blocks whose first line is `// name.ts` (the app) or `// name.ts, variant` (a variant of
// it, such as the ambient-transaction files or the inbox app). Reads README.md and docs/*.md.
//
//   node readme-snippets.mjs <repository root> <out dir> [variant prefix ...]
//
// Writes every base file, then the files of each variant whose name starts with a given prefix
// (a variant file replaces the base file of the same name). Prints the files written.
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const [root, out, ...prefixes] = process.argv.slice(2);
if (root === undefined || out === undefined) {
  console.error('usage: node readme-snippets.mjs <root> <out dir> [variant prefix ...]');
  process.exit(2);
}
const pages = [join(root, 'README.md')];
const docs = join(root, 'docs');
if (existsSync(docs)) {
  for (const name of readdirSync(docs).sort()) if (name.endsWith('.md')) pages.push(join(docs, name));
}
const snippets = pages.flatMap((page) =>
  [...readFileSync(page, 'utf8').matchAll(/^```ts\n\/\/ ([\w.-]+\.ts)(?:, (.+))?\n([\s\S]*?)^```/gm)].map(
    ([, file, variant, code]) => ({ file, variant: variant ?? '', code }),
  ),
);
const chosen = [
  ...snippets.filter((s) => s.variant === ''),
  ...prefixes.flatMap((prefix) => snippets.filter((s) => s.variant !== '' && s.variant.startsWith(prefix))),
];
if (chosen.filter((s) => s.variant === '').length < 4) throw new Error('documentation snippets not found');
for (const prefix of prefixes) {
  if (!snippets.some((s) => s.variant.startsWith(prefix))) throw new Error(`no snippet variant "${prefix}"`);
}
mkdirSync(out, { recursive: true });
const files = new Map();
for (const s of chosen) files.set(s.file, s.code);
for (const [file, code] of files) writeFileSync(join(out, file), code);
console.log(`snippets: ${[...files.keys()].join(' ')}`);
