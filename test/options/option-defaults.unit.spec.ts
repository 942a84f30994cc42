import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as ts from 'typescript';
import {
  OUTBOX_DEFAULTS,
  OUTBOX_EXTRA_DEFAULTS,
  type OptionDefault,
} from '../../lib/options/outbox-defaults';
import { OUTBOX_OPTION_KEYS } from '../../lib/options/resolve-outbox-options';

// The defaults table in lib/options/outbox-defaults.ts is the one statement of every default; the
// key list, the JSDoc `@default`s and the docs' Options table must say the same.

const root = join(__dirname, '..', '..');
const GROUP_KEY = 'the defaults of its keys';

const join2 = (group: string, key: string): string => (group === '' ? key : `${group}.${key}`);
const squeeze = (text: string): string => text.replace(/\s+/g, '');

function paths(table: Readonly<Record<string, Readonly<Record<string, unknown>>>>): string[] {
  return Object.entries(table).flatMap(([group, keys]) =>
    Object.keys(keys).map((key) => join2(group, key)),
  );
}

const groups = OUTBOX_DEFAULTS as unknown as Record<string, Record<string, OptionDefault>>;
const table = new Map<string, OptionDefault>(
  Object.entries(groups).flatMap(([group, keys]) =>
    Object.entries(keys).map(([key, entry]) => [join2(group, key), entry] as const),
  ),
);
const extras = new Map<string, OptionDefault>(Object.entries(OUTBOX_EXTRA_DEFAULTS));

/** The default as the docs write it: a literal (`200`, `'block'`, `null`), a rule, or words. */
function docText(entry: OptionDefault): string {
  if ('value' in entry) {
    return typeof entry.value === 'string' ? `'${entry.value}'` : String(entry.value);
  }
  return 'computed' in entry ? entry.computed : entry.described;
}

/** Whether a stated default (`86400000 (1 day)`, `min(10000, floor(leaseMs / 2))`) is the entry's. */
function states(stated: string, entry: OptionDefault): boolean {
  const text = docText(entry);
  if ('value' in entry) return stated === text || stated.startsWith(`${text} (`);
  if ('computed' in entry) return squeeze(stated) === squeeze(text);
  return stated === text;
}

/** Whether an option has no default to state: required, or a group whose keys have them. */
function unstated(entry: OptionDefault): boolean {
  return (
    'described' in entry &&
    (entry.described.startsWith('required') || entry.described === GROUP_KEY)
  );
}

/** Evaluates a rule of the table (`max(100, floor((a - b) / 2))`) with the TypeScript parser. */
function evaluateRule(rule: string, inputs: Readonly<Record<string, number>>): number {
  const source = ts.createSourceFile('rule.ts', `(${rule});`, ts.ScriptTarget.Latest);
  const functions: Record<string, (...args: number[]) => number> = {
    min: Math.min,
    max: Math.max,
    floor: Math.floor,
  };
  const evaluate = (node: ts.Node): number => {
    if (ts.isParenthesizedExpression(node)) return evaluate(node.expression);
    if (ts.isNumericLiteral(node)) return Number(node.text);
    if (ts.isIdentifier(node)) {
      const value = inputs[node.text];
      if (value === undefined) throw new Error(`unknown name ${node.text} in ${rule}`);
      return value;
    }
    if (ts.isCallExpression(node) && ts.isIdentifier(node.expression)) {
      const fn = functions[node.expression.text];
      if (fn === undefined) throw new Error(`unknown function in ${rule}`);
      return fn(...node.arguments.map(evaluate));
    }
    if (ts.isBinaryExpression(node)) {
      const [a, b] = [evaluate(node.left), evaluate(node.right)];
      switch (node.operatorToken.kind) {
        case ts.SyntaxKind.PlusToken:
          return a + b;
        case ts.SyntaxKind.MinusToken:
          return a - b;
        case ts.SyntaxKind.AsteriskToken:
          return a * b;
        case ts.SyntaxKind.SlashToken:
          return a / b;
      }
    }
    throw new Error(`cannot evaluate ${node.getText(source)} in ${rule}`);
  };
  const statement = source.statements[0];
  if (statement === undefined || !ts.isExpressionStatement(statement)) throw new Error(rule);
  return evaluate(statement.expression);
}

/** `@default` texts of each option in lib/options/outbox.options.ts, by path (extras apart). */
function jsdocDefaults(): { options: Map<string, string[]>; extras: Map<string, string[]> } {
  const file = join(root, 'lib', 'options', 'outbox.options.ts');
  const source = ts.createSourceFile(
    file,
    readFileSync(file, 'utf8'),
    ts.ScriptTarget.Latest,
    true,
  );
  const interfaces = new Map(
    source.statements.filter(ts.isInterfaceDeclaration).map((i) => [i.name.text, i] as const),
  );
  const top = interfaces.get('OutboxModuleOptions');
  if (top === undefined) throw new Error('OutboxModuleOptions not found');
  // A group is a member of OutboxModuleOptions whose type is another interface of the file.
  const groupOf = new Map<string, string>([['OutboxModuleOptions', '']]);
  for (const member of top.members) {
    if (!ts.isPropertySignature(member) || member.type === undefined) continue;
    const type = member.type.getText(source);
    if (interfaces.has(type)) groupOf.set(type, member.name.getText(source));
  }
  const read = (node: ts.InterfaceDeclaration, group: string, into: Map<string, string[]>) => {
    for (const member of node.members) {
      const tags = ts.getJSDocTags(member).filter((tag) => tag.tagName.text === 'default');
      into.set(
        join2(group, member.name?.getText(source) ?? '?'),
        tags.map((tag) => ts.getTextOfJSDocComment(tag.comment) ?? ''),
      );
    }
  };
  const options = new Map<string, string[]>();
  const extras = new Map<string, string[]>();
  for (const [name, node] of interfaces) {
    const group = groupOf.get(name);
    if (name === 'OutboxModuleExtras') read(node, '', extras);
    else if (group !== undefined) read(node, group, options);
    else
      throw new Error(`interface ${name} is neither the options, a group of them nor the extras`);
  }
  return { options, extras };
}

/** The Options section of the docs: docs/options.md once the README is split, else the README's. */
function optionsDoc(): { name: string; text: string } {
  const page = join(root, 'docs', 'options.md');
  if (existsSync(page)) return { name: 'docs/options.md', text: readFileSync(page, 'utf8') };
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const start = readme.indexOf('\n## Options\n');
  if (start < 0) throw new Error('README.md has no "## Options" section');
  const end = readme.indexOf('\n## ', start + 1);
  return { name: 'README.md', text: readme.slice(start, end < 0 ? undefined : end) };
}

const codeSpans = (cell: string): string[] =>
  [...cell.matchAll(/`([^`]*)`/g)].map((match) => match[1] ?? '');

/**
 * The default cell of each option in the Options table, by path. A row may hold several options
 * of one group: `` `retry.a` / `b` `` with defaults `` `1` / `2` ``.
 */
function docsDefaults(text: string): Map<string, string> {
  const rows = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (!line.startsWith('| `')) continue;
    const [names = '', stated = ''] = line.split(/(?<!\\)\|/).slice(1, 3);
    const [first = '', ...more] = codeSpans(names);
    const dot = first.lastIndexOf('.');
    const options = [
      first,
      ...more.map((key) => (dot < 0 ? key : `${first.slice(0, dot)}.${key}`)),
    ];
    const values = codeSpans(stated);
    options.forEach((option, i) => {
      rows.set(option, options.length === 1 ? stated.trim() : `\`${values[i] ?? ''}\``);
    });
  }
  return rows;
}

describe('option defaults', () => {
  it('has an entry for every key of OUTBOX_OPTION_KEYS, and no other', () => {
    expect(Object.keys(OUTBOX_DEFAULTS).sort()).toEqual(Object.keys(OUTBOX_OPTION_KEYS).sort());
    expect([...table.keys()].sort()).toEqual(paths(OUTBOX_OPTION_KEYS).sort());
    for (const group of Object.keys(OUTBOX_OPTION_KEYS)) {
      if (group !== '') expect(table.get(group)).toEqual({ described: GROUP_KEY });
    }
  });

  it('states each computed default by the rule its function applies', () => {
    const samples = [0, 1, 99, 100, 999, 1_000, 1_001, 19_999, 20_000, 20_001, 30_000, 86_400_000];
    for (const [path, entry] of table) {
      if (!('computed' in entry)) continue;
      const names = [...new Set(entry.computed.match(/[A-Za-z]\w*/g) ?? [])].filter(
        (name) => !['min', 'max', 'floor'].includes(name),
      );
      expect(names.length).toBeGreaterThan(0);
      const rule = entry.rule as (inputs: Readonly<Record<string, number>>) => number;
      let combos: Record<string, number>[] = [{}];
      for (const name of names) {
        combos = combos.flatMap((combo) => samples.map((value) => ({ ...combo, [name]: value })));
      }
      for (const inputs of combos) {
        expect({ path, inputs, value: rule(inputs) }).toEqual({
          path,
          inputs,
          value: evaluateRule(entry.computed, inputs),
        });
      }
    }
  });

  it('matches every @default of outbox.options.ts', () => {
    const jsdoc = jsdocDefaults();
    expect([...jsdoc.options.keys()].sort()).toEqual([...table.keys()].sort());
    expect([...jsdoc.extras.keys()].sort()).toEqual([...extras.keys()].sort());
    const wrong: string[] = [];
    const check = (path: string, entry: OptionDefault | undefined, stated: string[] = []) => {
      if (entry === undefined) throw new Error(`${path} has no entry in the defaults table`);
      const ok = unstated(entry)
        ? stated.length === 0
        : stated.length === 1 && states(stated[0] ?? '', entry);
      const expected = unstated(entry) ? 'no @default' : `@default ${docText(entry)}`;
      if (!ok) wrong.push(`${path}: ${expected}, not ${JSON.stringify(stated)}`);
    };
    for (const [path, stated] of jsdoc.options) check(path, table.get(path), stated);
    for (const [path, stated] of jsdoc.extras) check(path, extras.get(path), stated);
    expect(wrong).toEqual([]);
  });

  it("matches the docs' Options table", () => {
    const doc = optionsDoc();
    const rows = docsDefaults(doc.text);
    const wrong: string[] = [];
    for (const [path, entry] of table) {
      if ('described' in entry && entry.described === GROUP_KEY) continue;
      const stated = rows.get(path);
      if (stated === undefined) {
        wrong.push(`${path}: no row in ${doc.name}`);
        continue;
      }
      const [span] = codeSpans(stated);
      // Words (required, none, host:pid:random) are not compared, but a value in code must not
      // stand where the table has words.
      const ok =
        'described' in entry ? span === undefined : span !== undefined && states(span, entry);
      if (!ok) wrong.push(`${path}: \`${docText(entry)}\` in the code, ${stated} in ${doc.name}`);
    }
    for (const [name, entry] of extras) {
      const stated = new RegExp(`\`${name}\`\\s+\\(default\\s+\`([^\`]+)\``).exec(doc.text)?.[1];
      if (stated !== docText(entry)) wrong.push(`extra ${name}: ${docText(entry)}, not ${stated}`);
    }
    expect(wrong).toEqual([]);
  });
});
