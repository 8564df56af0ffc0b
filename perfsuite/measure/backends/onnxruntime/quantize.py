"""Dynamic int8 quantization (``onnxruntime.quantization.quantize_dynamic``), cached like the export.

The quantized entry sits next to the float one (``<float key>-int8dyn-q<QUANT_VERSION>-ort<version>``) and its
marker records the top-1 (greedy) token agreement with the float ONNX model on teacher-forced steps. Agreement is
recorded, not demanded: int8 weights legitimately change near-tied argmaxes.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from perfsuite.facts import models
from perfsuite.measure.backends.onnxruntime import decoder_io, entries
from perfsuite.measure.backends.onnxruntime import export as ex

QUANT_VERSION = 1
AGREEMENT_CASES: tuple[tuple[int, int, int], ...] = ((2, 16, 8),)  # (batch, prompt, decode steps)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """ORT's quantization tools without warnings and without their root-logger notes ("Please consider to run
    pre-processing")."""
    root = logging.getLogger()
    old = root.level
    root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(old)


def top1_agreement(float_path: Path, quant_path: Path, meta: dict[str, Any]) -> float:
    """Fraction of positions where the int8 model's greedy token equals the float model's (teacher-forced on the
    float model's tokens so a single flip does not cascade)."""
    ref_sess, q_sess = decoder_io.cpu_session(float_path), decoder_io.cpu_session(quant_path)
    vocab = int(meta["geometry"]["vocab"])
    agree = total = 0
    for b, p, steps in AGREEMENT_CASES:
        prompt = np.array(models.prompts(b, p, vocab, seed=11), dtype=np.int64)
        ref = decoder_io.ort_greedy_logits(ref_sess, meta, prompt, steps=steps)  # float model on its own tokens
        forced = [r.argmax(-1) for r in ref[:-1]]
        got = decoder_io.ort_greedy_logits(q_sess, meta, prompt, forced)
        for r, g in zip(ref, got, strict=True):
            agree += int(np.sum(r.argmax(-1) == g.argmax(-1)))
            total += r.shape[0]
    return agree / total if total else 0.0


def quantize(float_result: ex.ExportResult) -> ex.ExportResult:
    """Cached int8-dynamic version of a float export (weights QInt8, activations quantized at run time)."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    float_entry = float_result.path.parent
    target = float_entry.parent / f"{float_entry.name}-int8dyn-q{QUANT_VERSION}-ort{ort.__version__}"
    float_sha = (float_result.meta.get("files") or {}).get(entries.MODEL_FILE, {}).get("sha256")
    meta = entries.read_entry(target) if target.exists() else None
    if meta is not None and (meta.get("float_sha256") != float_sha or entries.model_mismatch(
            target, Path(float_result.meta["model_dir"]), str(meta["dtype"]), weights=False)):
        meta = None  # quantized from another float graph (the float entry was rebuilt, or this one was copied in)
    if meta is not None and "int8_top1_agreement" in meta:
        return ex.ExportResult(target / entries.MODEL_FILE, meta, True, float(meta.get("quantize_seconds", 0.0)))
    t0 = time.perf_counter()
    with entries.building(target) as tmp:
        with quiet():
            quantize_dynamic(str(float_result.path), str(tmp / entries.MODEL_FILE), weight_type=QuantType.QInt8,
                             per_channel=False, reduce_range=False,
                             use_external_data_format=any(f.suffix == ".data" for f in float_entry.iterdir()))
        q_s = time.perf_counter() - t0
        meta = {**{k: v for k, v in float_result.meta.items() if k not in ("files", "verification")},
                "kind": "int8-dynamic", "quant_version": QUANT_VERSION, "float_entry": float_entry.name,
                "float_sha256": float_sha, "quantize_seconds": round(q_s, 3), "onnxruntime": ort.__version__}
        meta["int8_top1_agreement"] = round(top1_agreement(float_result.path, tmp / entries.MODEL_FILE, meta), 4)
        entries.write_entry(tmp, target, meta)
    return ex.ExportResult(target / entries.MODEL_FILE, meta, False, time.perf_counter() - t0)
