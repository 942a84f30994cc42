import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, posix, resolve } from 'node:path';
import ts from 'typescript';
import { OutboxMessages } from '../../lib/outbox.messages';
import { OUTBOX_OPTION_KEYS } from '../../lib/options/resolve-outbox-options';

// The documentation is part of the feature: its snippets must compile as written, the anchors
// that error messages point to must exist, every link must lead somewhere, and every option
// must be documented. The README is the front page; the rest lives in docs/*.md (and the
// library's insides in ARCHITECTURE.md).
const root = resolve(__dirname, '../..');
const read = (path: string): string => readFileSync(join(root, path), 'utf8');

/** README.md, ARCHITECTURE.md, CONTRIBUTING.md and every page of docs/, by path from the root (posix separators). */
const pages = new Map<string, string>([
  ['README.md', read('README.md')],
  ['ARCHITECTURE.md', read('ARCHITECTURE.md')],
  ['CONTRIBUTING.md', read('CONTRIBUTING.md')],
  ...readdirSync(join(root, 'docs'))
    .filter((file) => file.endsWith('.md'))
    .sort()
    .map((file): [string, string] => [`docs/${file}`, read(`docs/${file}`)]),
]);
const readme = pages.get('README.md') ?? '';

const withoutCode = (markdown: string): string => markdown.replace(/^```[\s\S]*?^```/gm, '');

/** GitHub's heading anchors (github-slugger): lower case, punctuation dropped, spaces to '-'. */
function githubAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const [, heading] of withoutCode(markdown).matchAll(/^#{1,6} (.+)$/gm)) {
    const base = (heading ?? '')
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** The anchors of a page, by its path from the repository root; empty for a missing page. */
function anchorsOf(page: string): Set<string> {
  const markdown = pages.get(page);
  return markdown === undefined ? new Set() : githubAnchors(markdown);
}

/**
 * Whether `page` names the section `title`: as a heading, or as the text of a link (a page that
 * sends the reader on to where the section now lives, as the README's contents do).
 */
function namesSection(page: string, title: string): boolean {
  const text = withoutCode(pages.get(page) ?? '').toLowerCase();
  const wanted = title.toLowerCase();
  const headings = [...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => m[1]);
  const linkTexts = [...text.matchAll(/\[([^\]]+)\]\(/g)].map((m) => m[1]);
  return headings.includes(wanted) || linkTexts.some((t) => t?.includes(wanted) === true);
}

/** Every text the library shows a user that may point into the documentation. */
function userFacingTexts(): string[] {
  const messages = Object.values(OutboxMessages).map((message) =>
    (message as (...args: string[]) => string)('x', 'y', 'z'),
  );
  // Strings of the sources too (the CLI builds some of its errors in place), with the
  // concatenations of a string split over lines joined back.
  const sources: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory()) walk(path);
      else if (path.endsWith('.ts')) sources.push(read(path).replace(/['`]\s*\+\s*\n\s*['`]/g, ''));
    }
  };
  walk('lib');
  return [...messages, ...sources];
}

/** A link target resolved from the page it is on: the page (or file) and the anchor, if any. */
function resolveLink(from: string, target: string): { path: string; anchor: string | undefined } {
  const [file = '', anchor] = target.split('#');
  const path = file === '' ? from : posix.normalize(posix.join(posix.dirname(from), file));
  return { path, anchor };
}

/** ```ts blocks that are whole files: their first line is `// name.ts` or `// name.ts, variant`. */
function fileSnippets(): { page: string; file: string; variant: string; code: string }[] {
  return [...pages].flatMap(([page, markdown]) =>
    [...markdown.matchAll(/^```ts\n\/\/ ([\w.-]+\.ts)(?:, (.+))?\n([\s\S]*?)^```/gm)].map(
      ([, file, variant, code]) => ({
        page,
        file: file ?? '',
        variant: variant ?? '',
        code: code ?? '',
      }),
    ),
  );
}

/** The package's subpaths mapped to their sources, as the repository's tsconfig.json maps them. */
function compilerPaths(): Record<string, string[]> {
  const config = ts.readConfigFile(join(root, 'tsconfig.json'), ts.sys.readFile).config as {
    compilerOptions: { paths: Record<string, string[]> };
  };
  return config.compilerOptions.paths;
}

/** What the doc snippets use of @types/better-sqlite3, as that package declares it. */
const BETTER_SQLITE3_TYPES = `declare module 'better-sqlite3' {
  namespace Database {
    interface RunResult {
      changes: number;
      lastInsertRowid: number | bigint;
    }
    interface Statement {
      run(...params: unknown[]): RunResult;
      all(...params: unknown[]): unknown[];
      readonly reader: boolean;
      readonly readonly: boolean;
    }
    interface Database {
      readonly name: string;
      readonly open: boolean;
      readonly inTransaction: boolean;
      prepare(source: string): Statement;
      exec(source: string): this;
      pragma(source: string): unknown;
      close(): this;
    }
  }
  const Database: new (filename?: string, options?: object) => Database.Database;
  export = Database;
}
`;

describe('README and docs/', () => {
  it('has the pages the README lists', () => {
    expect([...pages.keys()]).toEqual(
      expect.arrayContaining([
        'docs/getting-started.md',
        'docs/enqueue.md',
        'docs/outbox-table.md',
        'docs/delivery.md',
        'docs/ordering-and-dead-letters.md',
        'docs/publishers.md',
        'docs/inbox.md',
        'docs/operations.md',
        'docs/observability.md',
        'docs/options.md',
        'docs/testing.md',
        'docs/performance.md',
        'docs/upgrading.md',
      ]),
    );
    const linked = new Set(
      [...readme.matchAll(/\]\((docs\/[\w-]+\.md)[#)]/g)].map((m) => m[1] ?? ''),
    );
    for (const page of pages.keys()) if (page.startsWith('docs/')) expect(linked).toContain(page);
    expect(readme).toContain('](ARCHITECTURE.md)');
  });

  it('has the anchors that error messages point to, on the page they name', () => {
    const texts = userFacingTexts();
    const referenced = texts.flatMap((text) =>
      [...text.matchAll(/((?:docs\/)?[\w-]+\.md)#([\w-]+)/g)].map((m) => ({
        page: m[1] ?? '',
        anchor: m[2] ?? '',
      })),
    );
    // The transaction error points at step 3 (README.md#… in published versions, whose
    // messages users still see: the README keeps that heading).
    expect(referenced.map((r) => r.anchor)).toContain('3-enqueue-inside-your-transaction');
    expect(anchorsOf('README.md')).toContain('3-enqueue-inside-your-transaction');
    for (const { page, anchor } of referenced) {
      expect(`${page}#${anchor}: ${String(pages.has(page))}`).toBe(`${page}#${anchor}: true`);
      expect(anchorsOf(page)).toContain(anchor);
    }
  });

  it('has the sections that error messages name, on the page they name', () => {
    // `(README: "Upgrading from 0.1")`, `see "3. Enqueue inside your transaction" in the README`,
    // `(docs/upgrading.md: "Upgrading from 0.1")`.
    const named = userFacingTexts().flatMap((text) => [
      ...[...text.matchAll(/\b(README|docs\/[\w-]+\.md)(?:'s)?:? "([^"]+)"/g)].map((m) => ({
        page: m[1] === 'README' ? 'README.md' : (m[1] ?? ''),
        title: m[2] ?? '',
      })),
      ...[...text.matchAll(/"([^"]+)" in (?:the )?(README|docs\/[\w-]+\.md)/g)].map((m) => ({
        page: m[2] === 'README' ? 'README.md' : (m[2] ?? ''),
        title: m[1] ?? '',
      })),
    ]);
    expect(named.map((n) => n.title)).toEqual(
      expect.arrayContaining(['3. Enqueue inside your transaction', 'Upgrading from 0.1']),
    );
    const missing = named.filter(({ page, title }) => !namesSection(page, title));
    expect(missing).toEqual([]);
  });

  it('links only to pages, files and anchors that exist', () => {
    const broken: string[] = [];
    for (const [page, markdown] of pages) {
      for (const [, target] of withoutCode(markdown).matchAll(/\]\(([^)\s]+)\)/g)) {
        if (target === undefined || /^[a-z]+:/i.test(target)) continue; // https:, mailto:
        const { path, anchor } = resolveLink(page, target);
        if (!existsSync(join(root, path))) broken.push(`${page}: ${target} (no such file)`);
        else if (anchor !== undefined && !anchorsOf(path).has(anchor)) {
          broken.push(`${page}: ${target} (no such anchor)`);
        }
      }
    }
    expect(broken).toEqual([]);
  });

  it('documents every option key in docs/options.md', () => {
    const options = pages.get('docs/options.md') ?? '';
    expect(options).toContain('| option | default | meaning |');
    const missing: string[] = [];
    for (const [group, keys] of Object.entries(OUTBOX_OPTION_KEYS)) {
      for (const key of Object.keys(keys)) {
        if (group === '' && Object.hasOwn(OUTBOX_OPTION_KEYS, key)) continue; // a group: its keys are
        const path = group === '' ? key : `${group}.${key}`;
        // A row per option, or one row for several of a group: `retry.a` / `b` / `c`.
        const documented =
          options.includes(`\`${path}\``) ||
          (group !== '' && new RegExp(`\`${group}\\.[^\\n]*/ \`${key}\``).test(options));
        if (!documented) missing.push(path);
      }
    }
    expect(missing).toEqual([]);
  });

  it('has snippets that compile as complete files, imports included', () => {
    const snippets = fileSnippets();
    const base = snippets.filter((s) => s.variant === '');
    expect(base.map((s) => s.file).sort()).toEqual([
      'app.module.ts',
      'audit.module.ts',
      'main.ts',
      'order-created.event.ts',
      'order.entity.ts',
      'orders.service.ts',
    ]);
    // The app's files are the steps of Getting started, where the pack smoke test reads them.
    for (const s of base) expect(`${s.file}: ${s.page}`).toBe(`${s.file}: docs/getting-started.md`);
    // Each variant (the ambient-transaction files) replaces the base file of the same name.
    const apps = new Map<string, Map<string, string>>([['base', new Map()]]);
    for (const s of base) apps.get('base')?.set(s.file, s.code);
    const variants = snippets.filter((x) => x.variant !== '');
    // A file of a variant that prefixes others ("without typeorm" for "without typeorm: kysely")
    // is one file of each of them, compiled with each.
    const sharedBy = (s: { variant: string }, name: string): boolean =>
      name.startsWith(`${s.variant}: `);
    const shared = variants.filter((s) => variants.some((x) => sharedBy(s, x.variant)));
    for (const s of variants.filter((x) => !shared.includes(x))) {
      const app = apps.get(s.variant) ?? new Map(apps.get('base'));
      app.set(s.file, s.code);
      apps.set(s.variant, app);
    }
    for (const s of shared) {
      for (const [name, app] of apps) if (sharedBy(s, name)) app.set(s.file, s.code);
    }

    const dir = join(root, '.tmp', `readme-snippets-${process.pid}`);
    const files: string[] = [];
    // The project has no @types/better-sqlite3 (an app that uses it installs them, as the docs
    // say): the part of those types the snippets use, with their shape (`export =`, the
    // `Database.Database` type), so that the better-sqlite3 variant is compiled too.
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'better-sqlite3.d.ts'), BETTER_SQLITE3_TYPES);
    files.push(join(dir, 'better-sqlite3.d.ts'));
    [...apps.values()].forEach((app, i) => {
      mkdirSync(join(dir, String(i)), { recursive: true });
      for (const [file, code] of app) {
        writeFileSync(join(dir, String(i), file), code);
        files.push(join(dir, String(i), file));
      }
    });
    try {
      const program = ts.createProgram(files, {
        strict: true,
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.CommonJS,
        moduleResolution: ts.ModuleResolutionKind.Node10,
        esModuleInterop: true,
        skipLibCheck: true,
        noEmit: true,
        types: ['node', 'jest'],
        // As if installed: the package name resolves to the sources.
        baseUrl: root,
        paths: compilerPaths(),
      });
      const errors = ts
        .getPreEmitDiagnostics(program)
        .filter((d) => d.file === undefined || d.file.fileName.startsWith(dir))
        .map(
          (d) =>
            `${d.file?.fileName.slice(dir.length + 1) ?? ''}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`,
        );
      expect(errors).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
