"""Where artefacts derived from a model (ONNX exports, AWQ checkpoints) are cached. A cell knows its model directory,
not the session's ``cache_dir``; a preset lives in ``<cache root>/models/<name>-<digest>/`` with a marker file, so the
root can be read back from the model directory. Precedence: an explicit root > the root a perfsuite-materialised model
lives in > :func:`perfsuite.facts.models.default_cache_dir` (``PERFSUITE_CACHE_DIR`` or ``~/.cache/perfsuite``)."""

from __future__ import annotations

from pathlib import Path


def root_for(model_dir: Path | None, explicit: Path | None = None) -> Path:
    from perfsuite.facts import models

    if explicit is not None:
        return Path(explicit)
    if model_dir is not None:
        d = Path(model_dir)
        if d.parent.name == "models" and (d / models.MARKER).is_file():
            return d.parent.parent
    return models.default_cache_dir()
