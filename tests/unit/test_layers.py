"""The layering docs/architecture.md states, checked on the source (AST and text): the six layers and who may import
whom, no import circle, where pytest outcomes are raised, the one module that touches pytest-benchmark's internals,
the module sizes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "perfsuite"
MODULES = sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)

# Lowest first. A module may import its own layer and the layers below it, never one above.
LAYERS = ("facts", "machine", "measure", "verdict", "orchestrate", "adapters")
# The package's face and its entry points sit on top, with the adapters.
TOP = ("__init__.py", "plugin.py", "cli.py")


def _rel(p: Path) -> str:
    return p.relative_to(PKG).as_posix()


def _name(p: Path) -> str:
    parts = ["perfsuite", *p.relative_to(PKG).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


NAMES = {_name(p): p for p in MODULES}


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(source: str) -> set[str]:
    """Every module a source imports, at the top or inside a function, ``if TYPE_CHECKING:`` blocks left out
    (``from perfsuite import x`` gives perfsuite.x)."""
    tree = ast.parse(source)
    skip = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _type_checking(block)
            for n in ast.walk(block)} - {id(tree)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            ours = subs & set(NAMES)  # ``from perfsuite.x import y``: the module y, or the names of module x
            out.update(ours or {node.module}, subs - ours)
    return out


def _ours(name: str) -> str | None:
    """The perfsuite module ``name`` refers to (a module, or the module that defines the imported name)."""
    while name and name not in NAMES:
        name = name.rpartition(".")[0]
    return name or None


def layer_of(name: str) -> int:
    """0-based layer of a perfsuite module: its folder under perfsuite/ (the face and entry points: the top)."""
    parts = name.split(".")
    if len(parts) == 1 or f"{parts[1]}.py" in TOP:
        return len(LAYERS) - 1
    return LAYERS.index(parts[1])


def graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """perfsuite module -> the perfsuite modules it imports (itself left out)."""
    return {m: {r for i in _imports(src) if i.split(".")[0] == "perfsuite" and (r := _ours(i)) and r != m}
            for m, src in sources.items()}


def upward(edges: dict[str, set[str]]) -> list[str]:
    return [f"{m} (layer {LAYERS[layer_of(m)]}) imports {t} (layer {LAYERS[layer_of(t)]}, above it)"
            for m, ts in sorted(edges.items()) for t in sorted(ts) if layer_of(t) > layer_of(m)]


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


SOURCES = {m: p.read_text() for m, p in NAMES.items()}
GRAPH = graph(SOURCES)


def test_the_modules_are_found() -> None:
    assert len(MODULES) > 100 and any(_rel(p) == "plugin.py" for p in MODULES)


def test_every_module_sits_in_a_layer_and_the_top_level_is_small() -> None:
    top = sorted(_rel(p) for p in MODULES if "/" not in _rel(p))
    assert top == sorted(TOP), top
    folders = sorted({_rel(p).split("/")[0] for p in MODULES if "/" in _rel(p)})
    assert folders == sorted(LAYERS), folders


def test_no_module_imports_a_layer_above_its_own() -> None:
    bad = upward(GRAPH)
    assert not bad, "\n".join(bad)


def test_no_import_circle() -> None:
    found = circles(GRAPH)
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_the_checks_name_a_new_upward_import_and_a_new_circle() -> None:
    """The two checks above, on the real source with one import added: they must fail, naming both modules."""
    def edited(module: str, extra: str) -> dict[str, set[str]]:
        return {**GRAPH, **graph({module: SOURCES[module] + extra})}

    assert upward(edited("perfsuite.verdict.stats", "\nfrom perfsuite.orchestrate import session\n")) == ["perfsuite.verdict.stats (layer verdict) imports perfsuite.orchestrate.session "
                                     "(layer orchestrate, above it)"]
    found = circles(edited("perfsuite.facts.schema", "\ndef f():\n    from perfsuite.facts import config\n"))  # lazy too
    assert found and all("perfsuite.facts.schema" in c and "perfsuite.facts.config" in c for c in found), found
    assert not circles(edited("perfsuite.facts.schema", "\nif TYPE_CHECKING:\n    from perfsuite.facts import config\n"))


def _violations(where: str, banned: str, allowed: tuple[str, ...] = ()) -> list[str]:
    return [f"{_rel(p)} imports {m}" for p in MODULES if _rel(p).startswith(where) and not _rel(p).startswith(allowed)
            for m in sorted(_imports(p.read_text())) if m == banned or m.startswith(banned + ".")]


def test_only_the_cli_edge_imports_the_commands() -> None:
    bad = _violations("", "perfsuite.adapters.cli", ("adapters/cli/", "cli.py"))
    assert not bad, bad


@pytest.mark.parametrize("layer", ["facts/", "machine/", "measure/", "verdict/", "orchestrate/"])
def test_below_the_adapters_nothing_imports_pytest(layer: str) -> None:
    bad = _violations(layer, "pytest") + _violations(layer, "pytest_benchmark")
    assert not bad, bad


def test_pytest_outcomes_are_raised_only_at_the_pytest_edge() -> None:
    raised = re.compile(r"\bpytest\.(fail|skip|exit|xfail)\(|\bwarnings\.warn\(")  # a test's warnings too
    where = sorted({_rel(p) for p in MODULES if raised.search(p.read_text())})
    assert where == ["adapters/pytest/hooks.py", "plugin.py"], where


def test_only_pbcompat_touches_pytest_benchmarks_internals() -> None:
    private = re.compile(r"_benchmarksession|_make_stats|handle_loading|BenchmarkFixture\(|\b\w+\._mode\b|"
                         r"\.stats\.stats\b")
    where = sorted({_rel(p) for p in MODULES if private.search(p.read_text())})
    assert where == ["adapters/pytest/pbcompat.py"], where


def test_module_sizes() -> None:
    sizes = {_rel(p): len(p.read_text().splitlines()) for p in MODULES}
    assert sizes["plugin.py"] <= 200
    big = {k: n for k, n in sizes.items() if n > 400}
    assert not big, big
