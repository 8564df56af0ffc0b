"""Exported-decoder sweep over drawn (batch, seq, past) (docs/ops.md, "Exported decoder sweep").

Catches an export that is only right at (or near) its dummy shape (batch 2, seq 3, past 5 in
``perfsuite.measure.backends.onnxruntime.tracing``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from perfsuite.measure.ops.runner import short_error


@dataclass
class DecoderCase:
    batch: int
    seq: int
    past: int

    @property
    def shape_class(self) -> str:
        if self.seq == 1 and self.past > 0:
            return "decode"
        if self.past == 0:
            return "prefill"
        return "chunked"  # several new tokens on top of a cache (speculative / chunked prefill)


def decoder_cases(max_batch: int = 4, max_seq: int = 24, max_past: int = 40) -> st.SearchStrategy[DecoderCase]:
    dims = st.one_of(st.integers(1, max_seq), st.sampled_from([1, 2, 3, 5, 7, 16, 17]))
    return st.builds(DecoderCase, batch=st.integers(1, max_batch), seq=dims.filter(lambda s: s <= max_seq),
                     past=st.one_of(st.just(0), st.integers(1, max_past)))


# Canonical: decode, prefill, the export dummy itself, and neighbours of it.
CANONICAL = (DecoderCase(1, 1, 7), DecoderCase(1, 16, 0), DecoderCase(2, 3, 5), DecoderCase(3, 4, 6),
             DecoderCase(4, 1, 33))


class DecoderHarness:
    """Loads (or builds) the cached export of ``model`` once and checks drawn shapes against torch."""

    def __init__(self, model: str = "tiny-llama", dtype: str = "float32") -> None:
        from perfsuite.facts import models
        from perfsuite.measure.backends.onnxruntime import decoder_io, tracing
        from perfsuite.measure.backends.onnxruntime import export as ex
        from perfsuite.measure.ops import ort_adapter

        resolved = models.resolve(model)
        spec = ex.ExportSpec(resolved.path, ex.model_digest(resolved.path), dtype=dtype)
        self.result = ex.export(spec)
        self.meta = self.result.meta
        self.dtype = dtype
        self.decoder_io = decoder_io
        self.session = ort_adapter.make_session(self.result.path.read_bytes(), "onnxruntime-cpu", dtype)
        self.torch_model = tracing.load_torch_model(resolved.path, dtype)
        self.vocab = int(self.meta["geometry"]["vocab"])

    def check(self, case: DecoderCase, seed: int = 0) -> dict[str, Any]:
        import torch

        rng = np.random.default_rng(seed)
        ids = rng.integers(4, self.vocab, (case.batch, case.past + case.seq), dtype=np.int64)
        with torch.no_grad():
            full = self.torch_model(input_ids=torch.from_numpy(ids), use_cache=False)
            ref = full.logits[:, -1, :].float().numpy()
            if case.past:
                pre = self.torch_model(input_ids=torch.from_numpy(ids[:, :case.past]), use_cache=True)
                past = [t.numpy() for layer in pre.past_key_values.layers for t in (layer.keys, layer.values)]
            else:
                past = self.decoder_io.empty_past(self.meta, case.batch)
        names = [i.name for i in self.session.get_inputs()]
        try:
            out = self.session.run(None, self.decoder_io.step_feeds(names, ids[:, case.past:], case.past, past))
        except Exception as exc:
            return {"status": "unsupported", "detail": short_error(exc), "case": case.__dict__}
        got = out[0].astype(np.float32)
        if got.shape != ref.shape:
            return {"status": "wrong", "detail": f"logits shape {got.shape} != {ref.shape}", "case": case.__dict__}
        atol = self.decoder_io.tolerance(self.dtype, ref)
        diff, wrong_tokens = self.decoder_io.compare_logits(ref, got, atol)
        ok = np.isfinite(got).all() and diff <= atol and wrong_tokens == 0
        return {"status": "pass" if ok else "wrong", "max_abs_diff": diff, "atol": atol,
                "token_mismatches": wrong_tokens, "case": case.__dict__,
                "detail": "" if ok else f"max|logit diff| {diff:.3g} > tol {atol:.3g} or {wrong_tokens} greedy "
                                        "token(s) differ"}
