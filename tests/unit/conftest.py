"""Fixtures shared by the unit tests."""

from __future__ import annotations

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
