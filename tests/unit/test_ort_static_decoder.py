"""The static-shape ONNX decoder (fixed-capacity KV cache, one input shape per session) on ORT's CPU EP: its export,
tokens equal to the dynamic export's and torch's, one input shape per session per generation (the dynamic decoder:
one per step), IO binding with ping-pong buffers, and the MIGraphX int8 calibration table built from it.

Exports go to a module-scoped temporary PERFSUITE_CACHE_DIR (tiny models: seconds each).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
pytest.importorskip("torch")

from perfsuite.facts import models  # noqa: E402
from perfsuite.facts.cells import Cell, Scenario  # noqa: E402
from perfsuite.measure.backends import create  # noqa: E402
from perfsuite.measure.backends.onnxruntime import decoder_io, tracing  # noqa: E402
from perfsuite.measure.backends.onnxruntime import export as ex  # noqa: E402
from perfsuite.measure.backends.torch_backend import TorchBackend  # noqa: E402

SC = Scenario("t", 2, 16, 8)
TINY = ("tiny-llama", "tiny-opt")


@pytest.fixture(scope="module")
def torch_tokens(perfsuite_cache: Path) -> dict[str, list[list[int]]]:
    out = {}
    for name in TINY:
        b = TorchBackend(Cell("torch", name, "float32", SC, model_dir=models.resolve(name).path))
        b.load()
        out[name] = _generate(b, _prompts(name))
        b.close()
    return out


def _prompts(name: str) -> list[list[int]]:
    return models.prompts(SC.batch_size, SC.prompt_tokens, models.resolve(name).vocab_size)


def _generate(backend: Any, prompts: list[list[int]]) -> list[list[int]]:
    return backend.generate(prompts, SC.new_tokens)


def _cell(name: str, **opts: Any) -> Cell:
    return Cell("onnxruntime-cpu", name, "float32", SC, model_dir=models.resolve(name).path,
                options=tuple(sorted(opts.items())))


@pytest.mark.parametrize("name", TINY)
def test_static_export_keeps_named_symbolic_dims_and_verifies(perfsuite_cache: Path, name: str) -> None:
    path = models.resolve(name).path
    res = ex.export(ex.ExportSpec(path, ex.model_digest(path), layout="static"))
    assert res.meta["layout"] == "static" and "-static-" in res.path.parent.name
    assert res.meta["verification"]["ok"], res.meta["verification"]["failures"]
    assert tracing.static_dim_problems(res.path, "static") == []
    g = onnx.load(str(res.path)).graph
    dims = {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in list(g.input) + list(g.output)}
    assert dims["attention_mask"] == ["batch", "capacity"]
    assert dims["past_key_values.0.key"][0::2] == ["batch", "capacity"] == dims["present.3.value"][0::2]
    dyn = ex.ExportSpec(path, ex.model_digest(path))
    assert dyn.key != ex.ExportSpec(path, ex.model_digest(path), layout="static").key


def test_static_dim_problems_names_a_renamed_capacity(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Identity", ["attention_mask"], ["logits"])], "g",
                          [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"])],
                          [helper.make_tensor_value_info("logits", TensorProto.INT64, ["batch", "total"])])
    onnx.save(helper.make_model(g), str(tmp_path / "m.onnx"))
    assert tracing.static_dim_problems(tmp_path / "m.onnx", "static") == ["attention_mask[1]=total"]
    assert tracing.static_dim_problems(tmp_path / "m.onnx", "dynamic") == []


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("io_binding", [False, True])
def test_static_tokens_equal_dynamic_and_torch_with_one_shape_per_session(
        perfsuite_cache: Path, torch_tokens: dict, name: str, io_binding: bool) -> None:
    prompts = _prompts(name)
    got = {}
    info = {}
    for layout in ("dynamic", "static"):
        b = create(_cell(name, decoder=layout, io_binding=io_binding))
        assert b.availability() is None
        b.load()
        got[layout] = [_generate(b, prompts) for _ in range(2)]  # twice: buffers reused across generations
        info[layout] = b.info()
        b.close()
    for layout in ("dynamic", "static"):
        assert got[layout][0] == got[layout][1]
        assert got[layout][0] == torch_tokens[name], layout
    st, dy = info["static"], info["dynamic"]
    assert st["decoder_layout"] == "static" and dy["decoder_layout"] == "dynamic"
    assert st["decoder_layout_reason"] == "set by backend option decoder"
    assert st["input_shapes_per_generation"] == {"decode": 1, "prefill": 1}
    assert st["max_input_shapes_per_session"] == 1
    assert st["decoder"]["capacity"] == SC.prompt_tokens + SC.new_tokens and st["decoder"]["sessions"] == 2
    assert st["decoder"]["bound_buffers"] is io_binding
    # the dynamic decoder: the prefill's shape and one new past length per decode step, all in one session
    assert dy["input_shapes_per_generation"] == {"decoder": SC.new_tokens}


def test_static_sessions_are_pinned_to_the_cell_shape(perfsuite_cache: Path) -> None:
    b = create(_cell("tiny-llama", decoder="static"))
    b.load()
    try:
        sessions = [b.runner.prefill_sess, b.runner.decode_sess]  # type: ignore[union-attr]
        shapes = [{i.name: i.shape for i in s.get_inputs()} for s in sessions]
        cap = SC.prompt_tokens + SC.new_tokens
        assert shapes[0]["input_ids"] == [SC.batch_size, SC.prompt_tokens]
        assert shapes[1]["input_ids"] == [SC.batch_size, 1]
        assert shapes[0]["past_key_values.0.key"] == shapes[1]["past_key_values.0.key"] == [SC.batch_size, 4, cap, 32]
        with pytest.raises(decoder_io.ExportError, match=r"pinned to batch 2 x prompt 16"):
            b.prefill([[5] * 8])
    finally:
        b.close()


def test_static_steps_past_capacity_refused() -> None:
    with pytest.raises(decoder_io.ExportError, match="do not fit its capacity 4"):
        decoder_io.step_feeds(["input_ids", "attention_mask", "position_ids"], np.zeros((1, 1), np.int64), 4, [], capacity=4)


def test_calibration_table_from_the_static_export(perfsuite_cache: Path) -> None:
    """int8-static (MIGraphX): ORT's MinMax calibrator over the cell's own prefill and decode feeds, written as the
    flatbuffers table the MIGraphX EP reads; cached beside the export."""
    from perfsuite.measure.backends.onnxruntime import calibration

    path = models.resolve("tiny-llama").path
    res = ex.export(ex.ExportSpec(path, ex.model_digest(path), layout="static"))
    cell = Cell("onnxruntime-migraphx", "tiny-llama", "float32", SC, device="cuda", quantization="int8-static",
                model_dir=path)
    feeds = calibration.calibration_feeds(res, cell)
    assert feeds[0]["input_ids"].shape == (2, 16) and all(f["input_ids"].shape == (2, 1) for f in feeds[1:])
    table = calibration.table_for(res, cell)
    ranges = calibration.read_table(table)
    assert {"logits", "present.0.key", "present.3.value"} <= set(ranges)
    assert all(np.isfinite(v) for v in ranges.values()) and max(ranges.values()) > 0
    assert calibration.table_for(res, cell) == table  # cached
    assert table.parent.name.startswith(res.path.parent.name + "-calib-minmax-b2-p16-n8")


def test_int8_static_is_migraphx_only() -> None:
    b = create(Cell("onnxruntime-cpu", "tiny-llama", "float32", SC, quantization="int8-static"))
    assert "MIGraphX's calibrated int8" in (b.availability() or "")
