"""Fixtures shared by the unit tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def perfsuite_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A module's own PERFSUITE_CACHE_DIR (models and ONNX exports), so modules do not share or race on caches."""
    root = tmp_path_factory.mktemp("perfsuite-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFSUITE_CACHE_DIR", str(root))
        yield root


@pytest.fixture
def test_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test-only ops of :mod:`ops_testing` (``_abort``, ``_nan``) in this process's op registry."""
    from ops_testing import TEST_OPS

    from perfsuite.measure.ops import registry

    for op in TEST_OPS:
        monkeypatch.setitem(registry.OPS, op.name, op)


@pytest.fixture
def test_ops_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python children register the test-only ops at start (a ``sitecustomize`` module)."""
    site = tmp_path / "test-ops-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\nimport ops_testing\nops_testing.register()\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    return env
