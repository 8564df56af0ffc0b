"""The layering docs/architecture.md states, checked on the source (AST and text): who may import whom, where pytest
outcomes are raised, the one module that touches pytest-benchmark's internals, the module sizes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "perfsuite"
MODULES = sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(p: Path) -> str:
    return p.relative_to(PKG).as_posix()


def _imports(p: Path) -> set[str]:
    """Every module ``p`` imports, at the top or inside a function (``from perfsuite import x`` gives perfsuite.x)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(p.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _violations(where: str, banned: str, allowed: tuple[str, ...] = ()) -> list[str]:
    return [f"{_rel(p)} imports {m}" for p in MODULES if _rel(p).startswith(where) and not _rel(p).startswith(allowed)
            for m in sorted(_imports(p)) if m == banned or m.startswith(banned + ".")]


def test_the_modules_are_found() -> None:
    assert len(MODULES) > 100 and any(_rel(p) == "plugin.py" for p in MODULES)


def test_only_the_cli_edge_imports_the_commands() -> None:
    bad = _violations("", "perfsuite.adapters.cli", ("commands/", "cli.py"))
    assert not bad, bad


@pytest.mark.parametrize("layer", ["gate/", "backends/", "measure.py", "worker/", "noise.py", "vocabulary.py"])
def test_the_inner_layers_never_import_pytest(layer: str) -> None:
    bad = _violations(layer, "pytest")
    assert not bad, bad


def test_the_backends_never_import_the_gate_or_the_session() -> None:
    bad = [v for banned in ("perfsuite.verdict", "perfsuite.orchestrate.session", "perfsuite.adapters.pytest.hooks", "perfsuite.orchestrate.plan")
           for v in _violations("backends/", banned)]
    assert not bad, bad


def test_pytest_outcomes_are_raised_only_at_the_pytest_edge() -> None:
    raised = re.compile(r"\bpytest\.(fail|skip|exit|xfail)\(|\bwarnings\.warn\(")  # a test's warnings too
    where = sorted({_rel(p) for p in MODULES if raised.search(p.read_text())})
    assert where == ["plugin.py", "pytest_session.py"], where


def test_only_pbcompat_touches_pytest_benchmarks_internals() -> None:
    private = re.compile(r"_benchmarksession|_make_stats|handle_loading|BenchmarkFixture\(|\b\w+\._mode\b|"
                         r"\.stats\.stats\b")
    where = sorted({_rel(p) for p in MODULES if private.search(p.read_text())})
    assert where == ["pbcompat.py"], where


def test_module_sizes() -> None:
    sizes = {_rel(p): len(p.read_text().splitlines()) for p in MODULES}
    assert sizes["plugin.py"] <= 200
    big = {k: n for k, n in sizes.items() if n > 400}
    assert not big, big
