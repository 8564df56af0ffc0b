"""Backend registry: names map to classes that are imported only when a cell of theirs runs."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from perfsuite.facts.backend_options import BACKENDS, known_backends
from perfsuite.measure.backends.base import Backend, MemoryStats, StepResult

if TYPE_CHECKING:
    from perfsuite.facts.cells import Cell

__all__ = ["BACKENDS", "Backend", "MemoryStats", "StepResult", "create", "known_backends"]


def create(cell: Cell, cache_dir: Path | None = None) -> Backend:
    """Instantiate the backend of a cell (resolved: ``cell.model_dir`` set, before ``load()``); ``cache_dir``: where
    derived artefacts such as ONNX exports go (None: beside the model). Raises KeyError for an unknown name (config
    validation runs first)."""
    module_name, _, cls_name = BACKENDS[cell.backend].partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    backend: Backend = cls(cell, cache_dir=cache_dir)
    return backend
