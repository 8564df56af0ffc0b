"""Count perfsuite's lines two ways: physical, and code (not blank, not a comment, not a docstring).

    python scripts/loc.py [PATH...]            totals of the Python files under each PATH (default: perfsuite)
    python scripts/loc.py --commits REV...     what each commit changed in perfsuite/, physical and code, and the sum

docs/architecture.md ("Size") quotes both counts.
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize
from pathlib import Path

_SKIP = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)


def code_lines(src: str) -> int:
    """Lines that hold a token other than a comment, and are not part of a module, class or function docstring."""
    docs: set[int] = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                docs.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type not in _SKIP:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docs)
    return len(lines)


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], capture_output=True, text=True)


def _at(rev: str, files: list[str]) -> tuple[int, int]:
    physical = code = 0
    for f in files:
        shown = _git("show", f"{rev}:{f}")
        if shown.returncode == 0:  # absent on that side: added or deleted by the commit
            physical += len(shown.stdout.splitlines())
            code += code_lines(shown.stdout)
    return physical, code


def commits(revs: list[str]) -> int:
    total = [0, 0]
    for rev in revs:
        names = _git("show", "--name-only", "--format=", rev).stdout.split()
        files = [f for f in names if f.startswith("perfsuite/") and f.endswith(".py")]
        before, after = _at(f"{rev}^", files), _at(rev, files)
        delta = [after[0] - before[0], after[1] - before[1]]
        total = [total[0] + delta[0], total[1] + delta[1]]
        print(f"{rev[:10]:<10} {delta[0]:+7d} {delta[1]:+7d}")
    print(f"{'total':<10} {total[0]:+7d} {total[1]:+7d}   (physical, code)")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--commits"]:
        return commits(argv[1:])
    physical = code = files = 0
    for arg in argv or ["perfsuite"]:
        root = Path(arg)
        for f in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            src = f.read_text(encoding="utf8")
            physical += len(src.splitlines())
            code += code_lines(src)
            files += 1
    print(f"{physical} physical, {code} code lines in {files} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
