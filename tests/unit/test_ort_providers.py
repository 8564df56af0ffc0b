"""ONNX Runtime execution-provider mapping, availability reasons and fallback detection (no model export)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from perfsuite.facts.cells import Cell, Scenario  # noqa: E402
from perfsuite.measure.backends.onnxruntime import providers as pv  # noqa: E402
from perfsuite.measure.backends.onnxruntime.backend import OrtBackend, capture_stderr_fd  # noqa: E402

DATA = Path(__file__).parent / "data"
SC = Scenario("smoke", 1, 8, 4)


def _relu_model() -> bytes:
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return bytes(m.SerializeToString())


# ------------------------------------------------------------------------------------------ option building

def test_cpu_defaults() -> None:
    cfg = pv.build_session_config("onnxruntime-cpu", "float32", {}, "1.32.0")
    assert cfg.providers == ["CPUExecutionProvider"] and cfg.provider_options == [{}]
    assert pv.DISABLE_CPU_FALLBACK not in cfg.config_entries
    assert cfg.config_entries[pv.RECORD_ASSIGNMENT] == "1"
    assert (cfg.strict, cfg.io_binding, cfg.graph_optimization_level, cfg.io_device) == (False, False, "all", "cpu")


@pytest.mark.parametrize("level", pv.OPT_LEVELS)
def test_optimization_level(level: str) -> None:
    assert pv.build_session_config("onnxruntime-cpu", "float32", {"graph_optimization_level": level},
                                   "1.32.0").graph_optimization_level == level


def test_cpu_threads_and_io_binding() -> None:
    cfg = pv.build_session_config("onnxruntime-cpu", "float32", {"threads": 2, "io_binding": True}, "1.32.0")
    assert cfg.session_attrs == {"intra_op_num_threads": 2} and cfg.io_binding


@pytest.mark.parametrize("backend,ep", [("onnxruntime-cuda", "CUDAExecutionProvider"),
                                        ("onnxruntime-rocm", "ROCMExecutionProvider"),
                                        ("onnxruntime-migraphx", "MIGraphXExecutionProvider"),
                                        ("onnxruntime-dml", "DmlExecutionProvider")])
def test_device_providers_strict_by_default(backend: str, ep: str) -> None:
    cfg = pv.build_session_config(backend, "float16", {}, "1.22.0")
    assert cfg.providers == [ep]  # strict: the CPU EP must not be listed (ORT rejects the combination)
    assert cfg.config_entries[pv.DISABLE_CPU_FALLBACK] == "1"
    assert cfg.strict and cfg.io_binding and cfg.is_device
    assert cfg.provider_options[0]["device_id"] == "0"
    loose = pv.build_session_config(backend, "float16", {"strict": False, "device_id": 1}, "1.22.0")
    assert loose.providers == [ep, "CPUExecutionProvider"] and pv.DISABLE_CPU_FALLBACK not in loose.config_entries
    assert loose.provider_options[0]["device_id"] == "1"


MIGX_KEYS = json.loads((DATA / "ort_migraphx_python_provider_keys.json").read_text())


def _captured(tag: str) -> set[str]:
    return set(MIGX_KEYS["versions"][tag]["keys"])


def test_migraphx_key_table_matches_the_captured_source() -> None:
    """Our per-version table equals the keys read from ORT's Python binding at each tag (the captured file names
    the file and commit); the 1.23 row is AMD's integration branch."""
    for tag, row in MIGX_KEYS["versions"].items():
        if not tag.startswith("v"):
            continue
        where, keys = pv.migraphx_python_keys(row["VERSION_NUMBER"])
        assert set(keys) == set(row["keys"]), (tag, where)
    assert set(pv.migraphx_python_keys("1.23.0")[1]) == _captured("wml-main (2025-07-26, VERSION_NUMBER 1.23.0)")
    assert pv.migraphx_python_keys("1.32.0") == pv.migraphx_python_keys("1.23.0")
    assert pv.migraphx_python_keys("1.16.3") == pv.migraphx_python_keys("1.17.0")  # oldest captured list


@pytest.mark.parametrize("tag", ["v1.17.0", "v1.19.2", "v1.20.0", "v1.22.1",
                                 "wml-main (2025-07-26, VERSION_NUMBER 1.23.0)"])
def test_migraphx_options_use_only_keys_that_version_accepts(tag: str) -> None:
    """Before: ORT < 1.20 got trt_fp16_enable / migx_int8_enable (the C++ parser's names, which the Python binding
    rejects with "Invalid MIGraphX EP option" and falls back to the CPU), and >= 1.20 got migraphx_mem_limit /
    migraphx_model_cache_dir, which no binding up to 1.22 accepts."""
    version = MIGX_KEYS["versions"][tag]["VERSION_NUMBER"]
    accepted = _captured(tag)
    for dtype, quant in (("float16", "none"), ("float32", "none"), ("float16", "int8-static")):
        cfg = pv.build_session_config("onnxruntime-migraphx", dtype, {"int8_native_calibration_table": True}, version,
                                      quant, "/t/calibration.flatbuffers")
        po = cfg.provider_options[0]
        assert set(po) <= accepted, (tag, set(po) - accepted)
        assert po["migraphx_fp16_enable"] == ("1" if dtype == "float16" else "0")  # the dtypes axis
        assert po["migraphx_int8_enable"] == ("1" if quant == "int8-static" else "0")  # the quantizations axis
        if quant == "int8-static":
            assert po["migraphx_int8_calibration_table_name"] == "/t/calibration.flatbuffers"
            native = ("migraphx_int8_use_native_calibration_table" if "migraphx_int8_use_native_calibration_table"
                      in accepted else "migraphx_use_native_calibration_table")
            assert po[native] == "1"


def test_migraphx_names_across_the_1_23_rename() -> None:
    old = pv.migraphx_option_names("1.22.1")
    new = pv.migraphx_option_names("1.23.0")
    assert old["int8_native_calibration_table"] == "migraphx_use_native_calibration_table"
    assert new["int8_native_calibration_table"] == "migraphx_int8_use_native_calibration_table"
    assert "model_cache_dir" not in old and new["model_cache_dir"] == "migraphx_model_cache_dir"
    assert "exhaustive_tune" not in pv.migraphx_option_names("1.19.2")
    cfg = pv.build_session_config("onnxruntime-migraphx", "float16", {"exhaustive_tune": True, "model_cache_dir": "/c"},
                                  "1.23.0")
    assert cfg.provider_options[0] == {"device_id": "0", "migraphx_fp16_enable": "1", "migraphx_int8_enable": "0",
                                       "migraphx_exhaustive_tune": "1", "migraphx_model_cache_dir": "/c"}


@pytest.mark.parametrize("opts,version,match", [
    ({"model_cache_dir": "/c"}, "1.22.1", r"1\.22\.1's Python API has no such key"),
    ({"exhaustive_tune": True}, "1.18.0", "no such key"),
    ({"mem_limit": 1 << 30}, "1.23.0", "no onnxruntime version's Python API accepts a MIGraphX mem_limit"),
    ({"arena_extend_strategy": "kSameAsRequested"}, "1.22.1", "arena_extend_strategy"),
    ({"provider_options": {"trt_fp16_enable": 1}}, "1.20.0", r"trt_fp16_enable are not accepted by onnxruntime 1\.20\.0"),
    ({"int8": True}, "1.22.1", r"quantizations = \[\"int8-static\"\]"),
    ({"fp16": True}, "1.22.1", "contradicts the cell's dtype float32"),
])
def test_migraphx_option_errors(opts: dict, version: str, match: str) -> None:
    with pytest.raises(pv.ProviderConfigError, match=match):
        pv.build_session_config("onnxruntime-migraphx", "float32", opts, version)


def test_int8_static_needs_a_table_and_migraphx() -> None:
    with pytest.raises(pv.ProviderConfigError, match="needs a calibration table"):
        pv.build_session_config("onnxruntime-migraphx", "float16", {}, "1.22.1", "int8-static")
    with pytest.raises(pv.ProviderConfigError, match="MIGraphX's calibrated int8"):
        pv.build_session_config("onnxruntime-cpu", "float32", {}, "1.32.0", "int8-static", "/t")


@pytest.mark.parametrize("backend,opts,layout", [
    ("onnxruntime-cpu", {}, "dynamic"),
    ("onnxruntime-migraphx", {}, "static"),  # compiles per shape
    ("onnxruntime-cuda", {"enable_graph": True}, "static"),  # graph capture replays fixed shapes
    ("onnxruntime-rocm", {}, "dynamic"),
    ("onnxruntime-migraphx", {"decoder": "dynamic"}, "dynamic"),  # explicit choice wins
    ("onnxruntime-cpu", {"decoder": "static"}, "static"),
])
def test_decoder_layout_per_provider(backend: str, opts: dict, layout: str) -> None:
    got, why = pv.decoder_layout(backend, opts)
    assert got == layout and why
    if backend == "onnxruntime-migraphx" and not opts:
        assert "compiles the graph for each new input shape" in why


def test_decoder_layout_errors() -> None:
    with pytest.raises(pv.ProviderConfigError, match="enable_graph=true with decoder=dynamic"):
        pv.decoder_layout("onnxruntime-cuda", {"enable_graph": True, "decoder": "dynamic"})
    with pytest.raises(pv.ProviderConfigError, match="dynamic, static"):
        pv.decoder_layout("onnxruntime-cpu", {"decoder": "fixed"})


def test_migraphx_skip_reason_says_which_decoder_and_why() -> None:
    b = OrtBackend(Cell("onnxruntime-migraphx", "tiny-llama", "float16", SC, device="cuda"))
    if "MIGraphXExecutionProvider" in ort.get_available_providers():
        pytest.skip("MIGraphX is installed here")
    reason = b.availability()
    assert reason is not None and "would run the static decoder: MIGraphX compiles the graph" in reason


def test_migraphx_offload_copy() -> None:
    with pytest.raises(pv.ProviderConfigError, match="offload_copy"):
        pv.build_session_config("onnxruntime-migraphx", "float16", {"offload_copy": True}, "1.22.0")
    cfg = pv.build_session_config("onnxruntime-migraphx", "float16", {"offload_copy": False}, "1.22.0")
    assert "offload_copy" not in json.dumps(cfg.provider_options)


def test_rocm_and_cuda_options() -> None:
    rocm = pv.build_session_config("onnxruntime-rocm", "float16",
                                   {"tunable_op": True, "enable_graph": True, "mem_limit": 1024}, "1.22.0")
    assert rocm.provider_options[0] == {"device_id": "0", "tunable_op_enable": "1", "tunable_op_tuning_enable": "0",
                                        "gpu_mem_limit": "1024", "enable_hip_graph": "1"}
    cuda = pv.build_session_config("onnxruntime-cuda", "float16", {"enable_graph": True, "use_tf32": False,
                                                                   "cudnn_conv_algo_search": "HEURISTIC"}, "1.32.0")
    assert cuda.provider_options[0] == {"device_id": "0", "enable_cuda_graph": "1", "use_tf32": "0",
                                        "cudnn_conv_algo_search": "HEURISTIC"}
    raw = pv.build_session_config("onnxruntime-cuda", "float16", {"provider_options": {"x_y": 3}}, "1.32.0")
    assert raw.provider_options[0]["x_y"] == "3"


def test_dml_session_settings() -> None:
    cfg = pv.build_session_config("onnxruntime-dml", "float16", {}, "1.22.0")
    assert cfg.session_attrs == {"enable_mem_pattern": False, "execution_mode": "sequential"}
    assert cfg.io_device == "dml"


@pytest.mark.parametrize("opts,match", [({"graph_optimization_level": "max"}, "disable, basic, extended, all"),
                                        ({"bogus": 1}, "unknown onnxruntime backend option"),
                                        ({"strict": True}, "strict=true on onnxruntime-cpu")])
def test_bad_options(opts: dict, match: str) -> None:
    with pytest.raises(pv.ProviderConfigError, match=match):
        pv.build_session_config("onnxruntime-cpu", "float32", opts, "1.32.0")


# ------------------------------------------------------------------------------------------ availability

def test_availability_reason_names_the_package() -> None:
    reason = pv.availability_reason("onnxruntime-migraphx", ["CPUExecutionProvider", "AzureExecutionProvider"],
                                    "1.32.0")
    assert reason == ("onnxruntime 1.32.0 has no MIGraphXExecutionProvider (available: CPU, Azure); "
                      "install onnxruntime-migraphx on the ROCm runner")
    rocm = pv.availability_reason("onnxruntime-rocm", ["CPUExecutionProvider"], "1.32.0")
    assert rocm is not None and "onnxruntime-rocm (<= 1.22" in rocm and "migraphx" in rocm
    assert pv.availability_reason("onnxruntime-cpu", ["CPUExecutionProvider"], "1.32.0") is None
    assert pv.availability_reason("onnxruntime-cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"], "1") is None


@pytest.mark.parametrize("backend", ["onnxruntime-cuda", "onnxruntime-rocm", "onnxruntime-migraphx",
                                     "onnxruntime-dml"])
def test_backend_availability_on_this_install(backend: str) -> None:
    b = OrtBackend(Cell(backend, "tiny-llama", "float16", SC, device="cuda"))
    ep = pv.EP_OF_BACKEND[backend][0]
    if ep in ort.get_available_providers():
        assert b.availability() is None
    else:
        reason = b.availability()
        assert reason is not None and reason.startswith(f"onnxruntime {ort.__version__} has no {ep} (available: ")
        assert "the cell would run the " in reason


def test_backend_availability_dtype_and_quantization() -> None:
    assert "bfloat16" in (OrtBackend(Cell("onnxruntime-cpu", "tiny-llama", "bfloat16", SC)).availability() or "")
    assert "awq" in (OrtBackend(Cell("onnxruntime-cpu", "tiny-llama", "float32", SC, quantization="awq"))
                     .availability() or "")
    assert OrtBackend(Cell("onnxruntime-cpu", "tiny-llama", "float32", SC)).availability() is None


# ------------------------------------------------------------------------------------------ fallback detection

def test_fallback_is_an_error() -> None:
    with pytest.raises(pv.ProviderFallbackError, match="requested MIGraphXExecutionProvider"):
        pv.check_providers_in_use("MIGraphXExecutionProvider", ["CPUExecutionProvider"])
    with pytest.raises(pv.ProviderFallbackError):
        pv.check_providers_in_use("CUDAExecutionProvider", [])
    pv.check_providers_in_use("CUDAExecutionProvider", ["CUDAExecutionProvider", "CPUExecutionProvider"])


def test_conflict_message_captured() -> None:
    text = (DATA / "ort_1.32_disable_cpu_fallback_conflict.txt").read_text().splitlines()[-1]
    msg = pv.explain_session_error(text, "onnxruntime-cpu")
    assert msg is not None and "strict" in msg and "Conflicting session configuration" in msg
    assert pv.explain_session_error("something else entirely", "onnxruntime-cpu") is None


def test_conflict_message_live() -> None:
    """The real ORT error for CPU EP + disable_cpu_ep_fallback is recognised and explained."""
    so = ort.SessionOptions()
    so.add_session_config_entry(pv.DISABLE_CPU_FALLBACK, "1")
    so.log_severity_level = 4
    with pytest.raises(Exception) as info:
        ort.InferenceSession(_relu_model(), so, providers=["CPUExecutionProvider"])
    msg = pv.explain_session_error(str(info.value), "onnxruntime-migraphx")
    assert msg is not None and "strict=false" in msg and "onnxruntime-migraphx" in msg


def test_strict_disabled_fallback_message() -> None:
    text = ("[ONNXRuntimeError] : 1 : FAIL : This session contains graph nodes that are assigned to the default CPU "
            "EP, but fallback to CPU EP has been explicitly disabled by the user.")
    msg = pv.explain_session_error(text, "onnxruntime-rocm")
    assert msg is not None and "strict=false" in msg and "cpu_node_count" in msg


def test_count_assignment_captured() -> None:
    data = json.loads((DATA / "ort_1.32_graph_assignment_cpu.json").read_text())
    counts = pv.count_assignment(data)
    assert counts == {"CPUExecutionProvider": 507}  # tiny-llama, ORT 1.32, level all
    assert pv.cpu_node_summary(counts) == {"cpu_node_count": 507, "total_node_count": 507}
    assert pv.cpu_node_summary({"MIGraphXExecutionProvider": 90, "CPUExecutionProvider": 10}) == {
        "cpu_node_count": 10, "total_node_count": 100}


def test_count_assignment_live() -> None:
    so = ort.SessionOptions()
    so.add_session_config_entry(pv.RECORD_ASSIGNMENT, "1")
    sess = ort.InferenceSession(_relu_model(), so, providers=["CPUExecutionProvider"])
    if not hasattr(sess, "get_provider_graph_assignment_info"):
        pytest.skip(f"onnxruntime {ort.__version__} has no get_provider_graph_assignment_info")
    assert pv.count_assignment(sess.get_provider_graph_assignment_info()) == {"CPUExecutionProvider": 2}
    assert json.loads(pv.dumps_assignment(sess.get_provider_graph_assignment_info()))[0]["ep_name"]


def test_parse_node_placements_captured() -> None:
    text = (DATA / "ort_1.32_verbose_node_placements_cpu.log").read_text()
    assert pv.parse_node_placements(text) == {"CPUExecutionProvider": 446}


def test_parse_node_placements_split() -> None:
    # Format of session_state.cc VerifyEachNodeIsAssignedToAnEp when several EPs take nodes (not capturable on a
    # CPU-only install; line layout as ORT prints it).
    text = ("2026-01-01 00:00:00.0 [V:onnxruntime:, session_state.cc:1598 VerifyEachNodeIsAssignedToAnEp] Node "
            "placements\n"
            "2026-01-01 00:00:00.0 [V:onnxruntime:, session_state.cc:1610 VerifyEachNodeIsAssignedToAnEp]  Node(s) "
            "placed on [MIGraphXExecutionProvider]. Number of nodes: 3\n"
            "2026-01-01 00:00:00.0 [V:onnxruntime:, session_state.cc:1613 VerifyEachNodeIsAssignedToAnEp]   "
            "MGXKernel_graph_main_0 (MGXKernel_graph_main_0)\n"
            "2026-01-01 00:00:00.0 [V:onnxruntime:, session_state.cc:1610 VerifyEachNodeIsAssignedToAnEp]  Node(s) "
            "placed on [CPUExecutionProvider]. Number of nodes: 12\n")
    counts = pv.parse_node_placements(text)
    assert counts == {"MIGraphXExecutionProvider": 3, "CPUExecutionProvider": 12}
    assert pv.parse_node_placements("no report here") == {}


def test_verbose_log_capture_live() -> None:
    so = ort.SessionOptions()
    so.log_severity_level = 0
    so.log_verbosity_level = 0
    with capture_stderr_fd() as out:
        ort.InferenceSession(_relu_model(), so, providers=["CPUExecutionProvider"])
    assert pv.parse_node_placements(out[0]) == {"CPUExecutionProvider": 2}


def test_allow_spinning_maps_to_session_config() -> None:
    cfg = pv.build_session_config("onnxruntime-cpu", "float32", {"allow_spinning": False}, "1.32.0")
    assert cfg.config_entries["session.intra_op.allow_spinning"] == "0"
    assert "session.intra_op.allow_spinning" not in pv.build_session_config(
        "onnxruntime-cpu", "float32", {}, "1.32.0").config_entries
