"""The decoder-with-past ONNX graph: its interface, feeding it from numpy, and its parity with torch.

Graph interface (every model, every dtype)::

    inputs   input_ids       int64 [batch, seq]
             attention_mask  int64 [batch, total]        (total = past + seq; all ones: no padding)
             position_ids    int64 [batch, seq]
             past_key_values.{i}.key / .value  dtype [batch, kv_heads, past, head_dim]
    outputs  logits          dtype [batch, vocab]        (last position only)
             next_token      int64 [batch]               (greedy: argmax of logits)
             present.{i}.key / .value          dtype [batch, kv_heads, total, head_dim]

A prefill passes past tensors with ``past = 0``.

The *static* layout (``ExportSpec(layout="static")``, a second export of the same model; docs/recipes.md, "The
static-shape ONNX decoder") keeps the KV cache in fixed-capacity buffers: ``attention_mask`` is ``[batch, capacity]``
(1 = the slot holds a token of this sequence), ``position_ids`` are the slots written this step (slot ``j`` holds the
token at position ``j``), and past and present are ``[batch, kv_heads, capacity, head_dim]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from perfsuite.facts import models

# (batch, prompt, decode steps) for parity; the export dummy is (2, 3, past 5): every case differs from it.
VERIFY_CASES: tuple[tuple[int, int, int], ...] = ((1, 1, 2), (1, 6, 3), (3, 9, 2), (4, 17, 2))
# Which axes stay symbolic in the file, and their names (the static layout's are pinned per session).
DYNAMIC_DIM_NAMES: dict[str, dict[int, str]] = {"input_ids": {0: "batch", 1: "seq"},
                                                 "attention_mask": {0: "batch", 1: "total"},
                                                 "position_ids": {0: "batch", 1: "seq"},
                                                 "logits": {0: "batch"}, "next_token": {0: "batch"}}
STATIC_DIM_NAMES = {**DYNAMIC_DIM_NAMES, "attention_mask": {0: "batch", 1: "capacity"}}
STATIC_KV_DIM_NAMES = {0: "batch", 2: "capacity"}


class ExportError(RuntimeError):
    """Export or its verification failed; the message names the shapes/dimensions that disagree."""


def io_names(num_layers: int) -> tuple[list[str], list[str]]:
    kv = [f"{i}.{t}" for i in range(num_layers) for t in ("key", "value")]
    return (["input_ids", "attention_mask", "position_ids"] + [f"past_key_values.{n}" for n in kv],
            ["logits", "next_token"] + [f"present.{n}" for n in kv])


def cpu_session(path: Path) -> Any:
    """A CPU-EP session of an exported graph, with ORT's own log at severity 3 (errors and worse)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def empty_past(meta: dict[str, Any], batch: int, capacity: int = 0) -> list[np.ndarray]:
    """The past of a prefill: length 0 (dynamic layout) or ``capacity`` zeroed slots (static layout; zeros, not
    garbage, because a masked slot still multiplies its value by a zero weight and NaN * 0 is NaN)."""
    g = meta["geometry"]
    n = capacity if meta.get("layout") == "static" else 0
    return [np.zeros((batch, g["kv_heads"], n, g["head_dim"]), dtype=np.dtype(meta["dtype"]))
            for _ in range(2 * g["layers"])]


def step_feeds(input_names: list[str], ids: np.ndarray, past_len: int, past: list[Any],
               capacity: int | None = None) -> dict[str, Any]:
    """Feeds of one step: ``ids`` [batch, seq] after ``past_len`` tokens. ``capacity`` set = the static layout
    (mask over the capacity, 1 for the slots filled after this step)."""
    b, s = ids.shape
    if capacity is None:
        mask = np.ones((b, past_len + s), dtype=np.int64)
    else:
        if past_len + s > capacity:
            raise ExportError(f"static decoder: {past_len + s} tokens do not fit its capacity {capacity}")
        mask = np.zeros((b, capacity), dtype=np.int64)
        mask[:, :past_len + s] = 1
    return {"input_ids": ids.astype(np.int64), "attention_mask": mask,
            "position_ids": np.broadcast_to(np.arange(past_len, past_len + s, dtype=np.int64), (b, s)).copy(),
            **(dict(zip(input_names[3:], past, strict=True)) if past else {})}


def ort_greedy_steps(sess: Any, meta: dict[str, Any], prompt: np.ndarray, forced: list[np.ndarray] | None = None,
                     steps: int = 0, capacity: int | None = None) -> Iterator[tuple[dict[str, Any], list[Any]]]:
    """(feeds, outputs) of a prefill and of one decode step per ``forced`` token column (teacher forcing); with
    ``forced=None``, ``steps`` decode steps on the model's own greedy tokens. The static layout's capacity defaults
    to prompt + decode steps."""
    names = [i.name for i in sess.get_inputs()]
    b, p = prompt.shape
    n = len(forced) if forced is not None else steps
    cap = (capacity or p + n) if meta.get("layout") == "static" else None
    feeds = step_feeds(names, prompt, 0, empty_past(meta, b, cap or 0), cap)
    out = sess.run(None, feeds)
    yield feeds, out
    for k in range(n):
        tok = forced[k] if forced is not None else out[1]
        feeds = step_feeds(names, np.asarray(tok).reshape(b, 1), p + k, out[2:], cap)
        out = sess.run(None, feeds)
        yield feeds, out


def ort_greedy_logits(sess: Any, meta: dict[str, Any], prompt: np.ndarray, forced: list[np.ndarray] | None = None,
                      steps: int = 0) -> list[Any]:
    """Last-position logits of :func:`ort_greedy_steps`."""
    return [out[0].astype(np.float32) for _, out in ort_greedy_steps(sess, meta, prompt, forced, steps)]


def torch_greedy_logits(model: Any, prompt: np.ndarray, steps: int) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(prompt.astype(np.int64)), use_cache=True)
        logits = [out.logits[:, -1, :].float().numpy()]
        for _ in range(steps):
            nxt = out.logits[:, -1, :].argmax(-1)
            out = model(input_ids=nxt[:, None], past_key_values=out.past_key_values, use_cache=True)
            logits.append(out.logits[:, -1, :].float().numpy())
    return logits


def compare_logits(ref: np.ndarray, got: np.ndarray, atol: float) -> tuple[float, int]:
    """(max abs diff, number of rows whose greedy token differs although the reference top-2 margin > 2*atol)."""
    diff = float(np.abs(ref - got).max())
    top2 = np.sort(ref, axis=-1)[:, -2:]
    decisive = (top2[:, 1] - top2[:, 0]) > 2 * atol
    wrong = int(np.sum((ref.argmax(-1) != got.argmax(-1)) & decisive))
    return diff, wrong


def tolerance(dtype: str, ref: np.ndarray) -> float:
    scale = max(1.0, float(np.abs(ref).max()))
    return (2e-4 if dtype == "float32" else 2e-2) * scale


def verify_parity(model: Any, onnx_path: Path, meta: dict[str, Any],
                  cases: tuple[tuple[int, int, int], ...] = VERIFY_CASES) -> dict[str, Any]:
    """Teacher-forced greedy parity of the ONNX model (CPU EP) against torch at several shapes."""
    sess = cpu_session(onnx_path)
    vocab = int(meta["geometry"]["vocab"])
    report: list[dict[str, Any]] = []
    bad: list[str] = []
    for b, p, steps in cases:
        prompt = np.array(models.prompts(b, p, vocab, seed=7), dtype=np.int64)
        ref = torch_greedy_logits(model, prompt, steps)
        forced = [r.argmax(-1) for r in ref[:-1]]
        got = ort_greedy_logits(sess, meta, prompt, forced)
        for k, (r, g) in enumerate(zip(ref, got, strict=True)):
            atol = tolerance(meta["dtype"], r)
            diff, wrong = compare_logits(r, g, atol)
            shape = f"(batch={b}, prompt={p}, past={0 if k == 0 else p + k - 1}, seq={p if k == 0 else 1})"
            report.append({"shape": shape, "max_abs_diff": diff, "atol": atol, "token_mismatches": wrong})
            if diff > atol or wrong:
                bad.append(f"{shape}: max|logit diff|={diff:.3g} (tol {atol:.3g}), {wrong} greedy token(s) differ")
    return {"ok": not bad, "failures": bad, "cases": report}
