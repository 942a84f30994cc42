import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import ts from 'typescript';
import { OutboxMessages } from '../../lib/outbox.messages';
import { OUTBOX_OPTION_KEYS } from '../../lib/options/resolve-outbox-options';

// The README is part of the feature: its snippets must compile as written, the anchors that
// error messages point to must exist, and every option must be documented.
const root = resolve(__dirname, '../..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');

/** GitHub's heading anchors (github-slugger): lower case, punctuation dropped, spaces to '-'. */
function githubAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const withoutCode = markdown.replace(/^```[\s\S]*?^```/gm, '');
  for (const [, heading] of withoutCode.matchAll(/^#{1,6} (.+)$/gm)) {
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

/** ```ts blocks that are whole files: their first line is `// name.ts` or `// name.ts, variant`. */
function fileSnippets(): { file: string; variant: string; code: string }[] {
  return [...readme.matchAll(/^```ts\n\/\/ ([\w.-]+\.ts)(?:, (.+))?\n([\s\S]*?)^```/gm)].map(
    ([, file, variant, code]) => ({ file: file ?? '', variant: variant ?? '', code: code ?? '' }),
  );
}

/** The package's subpaths mapped to their sources, as the repository's tsconfig.json maps them. */
function compilerPaths(): Record<string, string[]> {
  const config = ts.readConfigFile(join(root, 'tsconfig.json'), ts.sys.readFile).config as {
    compilerOptions: { paths: Record<string, string[]> };
  };
  return config.compilerOptions.paths;
}

describe('README', () => {
  it('has the anchors that error messages point to', () => {
    const anchors = githubAnchors(readme);
    const texts = Object.values(OutboxMessages).map((message) =>
      (message as (...args: string[]) => string)('x', 'y', 'z'),
    );
    const referenced = texts.flatMap((text) =>
      [...text.matchAll(/README\.md#([\w-]+)/g)].map((m) => m[1]),
    );
    expect(referenced).toContain('3-enqueue-inside-your-transaction');
    for (const anchor of referenced) expect(anchors).toContain(anchor);
  });

  it('links only to anchors it has', () => {
    const anchors = githubAnchors(readme);
    const links = [...readme.matchAll(/\]\(#([^)]+)\)/g)].map((m) => m[1]);
    for (const link of links) expect(anchors).toContain(link);
  });

  it('documents every option key in the Options section', () => {
    const start = readme.indexOf('## Options');
    const options = readme.slice(start, readme.indexOf('\n## ', start + 1));
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

  it('has snippets in Usage that compile as complete files, imports included', () => {
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
    // Each variant (the ambient-transaction files) replaces the base file of the same name.
    const apps = new Map<string, Map<string, string>>([['base', new Map()]]);
    for (const s of base) apps.get('base')?.set(s.file, s.code);
    for (const s of snippets.filter((x) => x.variant !== '')) {
      const app = apps.get(s.variant) ?? new Map(apps.get('base'));
      app.set(s.file, s.code);
      apps.set(s.variant, app);
    }

    const dir = join(root, '.tmp', `readme-snippets-${process.pid}`);
    const files: string[] = [];
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
