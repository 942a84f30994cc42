#!/usr/bin/env python3
"""Moves TypeScript modules and rewrites every relative import that reaches them.

    python3 scripts/move-modules.py MOVES_FILE [--apply-only-imports]

MOVES_FILE has one `old/path.ts new/path.ts` pair a line (repository-relative). The files are
moved with `git mv`, then every relative specifier in lib/, test/, bench/, sample/ and scripts/
(.ts, .mts) that resolves to a moved file, and every relative specifier of a moved file, is
rewritten. With --apply-only-imports the files are taken as moved already: only the imports are
rewritten (for branches merged after the move).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = re.compile(r"""((?:from|import|require|jest\.mock|import\()\s*\(?\s*['"])(\.{1,2}/[^'"]*)(['"])""")


def specifier(from_file, to_file):
    rel = os.path.relpath(to_file, os.path.dirname(from_file))
    if rel.endswith('/index.ts'):
        rel = rel[: -len('/index.ts')]
    elif rel.endswith('.ts'):
        rel = rel[:-3]
    if not rel.startswith('.'):
        rel = './' + rel
    return rel


def main():
    moves_file = sys.argv[1]
    only_imports = '--apply-only-imports' in sys.argv
    moves = {}
    for line in open(moves_file):
        line = line.strip()
        if line and not line.startswith('#'):
            old, new = line.split()
            moves[old] = new
    back = {new: old for old, new in moves.items()}
    if not only_imports:
        for old, new in moves.items():
            os.makedirs(os.path.join(ROOT, os.path.dirname(new)), exist_ok=True)
            subprocess.check_call(['git', 'mv', old, new], cwd=ROOT)
    files = []
    for top in ('lib', 'test', 'bench', 'sample', 'scripts'):
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            if 'node_modules' in dirpath or '/generated' in dirpath:
                continue
            for name in names:
                if name.endswith('.ts') or name.endswith('.mts'):
                    files.append(os.path.relpath(os.path.join(dirpath, name), ROOT))
    changed = 0
    for path in files:
        # Where the file was when its specifiers were written: a moved file's own relative
        # imports are read from its old folder (after a merge, its new lines may be read from
        # either, so both are tried).
        was = back.get(path, path)
        dirs = [os.path.dirname(was), os.path.dirname(path)]
        if only_imports:
            dirs.reverse()
        text = open(os.path.join(ROOT, path)).read()
        new_text = SPEC.sub(lambda m: rewrite(m, path, dirs, moves), text)
        if new_text != text:
            open(os.path.join(ROOT, path), 'w').write(new_text)
            changed += 1
    print(f'move-modules: {len(moves)} moves, imports rewritten in {changed} files')


def known(base_dir, spec, moves):
    """The module `spec` names from `base_dir`, in the tree before or after the moves."""
    target = os.path.normpath(os.path.join(base_dir, spec))
    for candidate in (target + '.ts', target + '.mts', os.path.join(target, 'index.ts')):
        if candidate in moves or os.path.isfile(os.path.join(ROOT, candidate)):
            return candidate
    return None


def rewrite(match, path, dirs, moves):
    for base_dir in dirs:
        target = known(base_dir, match.group(2), moves)
        if target is not None:
            break
    else:
        return match.group(0)
    target = moves.get(target, target)
    return match.group(1) + specifier(path, target) + match.group(3)


if __name__ == '__main__':
    main()
