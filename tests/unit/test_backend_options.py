"""Backend option schemas (perfsuite/facts/backend_options.py) and the cell identity hash built on them."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.facts import backend_options as bo
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.measure.backends import BACKENDS

ROOT = Path(__file__).resolve().parents[2]
SC = Scenario("s", 1, 16, 4)

# How each backend reads its options: cell.option("key", ...) and, in the ORT backend, options.get("key") /
# options["key"] / "key" in options on the dict of cell options.
_READS = re.compile(r"""(?:\.option\(|options\.get\(|options\[)\s*["']([a-z_0-9]+)["']""")
_IN = re.compile(r"""["']([a-z_0-9]+)["']\s+in\s+options\b""")
_KEY_LOOP = re.compile(r"""for key in \(([^)]*)\):\s*\n\s*if key in options""")


def _keys_read(*files: str) -> set[str]:
    keys: set[str] = set()
    for f in files:
        text = (ROOT / "perfsuite" / "measure" / "backends" / f).read_text()
        keys |= set(_READS.findall(text)) | set(_IN.findall(text))
        for group in _KEY_LOOP.findall(text):
            keys |= set(re.findall(r"""["']([a-z_0-9]+)["']""", group))
    return keys


def test_every_backend_has_a_schema():
    assert set(bo.SCHEMAS) == set(BACKENDS)


@pytest.mark.parametrize(("backends", "files"), [
    (("torch", "torch-compile"), ("torch_backend.py",)),
    (("vllm",), ("vllm_backend.py", "vllm_engine_args.py", "vllm_common.py", "vllm_engine.py")),
    (tuple(b for b in BACKENDS if b.startswith("onnxruntime-")),
     ("onnxruntime/providers.py", "onnxruntime/backend.py", "onnxruntime/runners.py")),
])
def test_schema_lists_exactly_the_keys_the_backends_read(backends, files):
    """Adding `cell.option("new_key")` to a backend without a schema entry (or the reverse) fails here."""
    read = _keys_read(*files)
    listed = set().union(*(bo.SCHEMAS[b] for b in backends))
    assert read, "the scan found no option reads: update the patterns of this test"
    assert read == listed, f"read but not in the schema: {sorted(read - listed)}; listed but never read: " \
                           f"{sorted(listed - read)}"


def test_ort_schema_agrees_with_the_provider_module():
    from perfsuite.measure.backends.onnxruntime import providers

    ort = set().union(*(bo.SCHEMAS[b] for b in BACKENDS if b.startswith("onnxruntime-")))
    assert ort == set(providers.KNOWN_OPTIONS)
    assert bo.OPT_LEVELS == providers.OPT_LEVELS


def test_compile_modes_are_torchs():
    torch_inductor = pytest.importorskip("torch._inductor")
    assert set(bo.COMPILE_MODES) == set(torch_inductor.list_mode_options())


@pytest.mark.parametrize(("backend", "key", "value", "problem"), [
    ("vllm", "gpu_memory_utilization", 1.5, "must be <= 1"),
    ("vllm", "gpu_memory_utilization", float("nan"), "must be a number"),
    ("vllm", "max_model_len", True, "must be an integer"),
    ("vllm", "executor", "threads", 'must be one of "mp", "uni", "ray", "external_launcher"'),
    ("vllm", "load_format", "pt", 'must be one of "auto", "safetensors"'),
    ("onnxruntime-cpu", "threads", -1, "must be >= 0"),
    ("onnxruntime-cpu", "opset", 13, "must be >= 14"),
    ("onnxruntime-cpu", "provider_options", {"x": [1]}, "must be a table of string/number/boolean values"),
    ("onnxruntime-cuda", "cudnn_conv_algo_search", "FAST", 'must be one of "EXHAUSTIVE"'),
    ("onnxruntime-rocm", "arena_extend_strategy", "grow", 'must be one of "kNextPowerOfTwo", "kSameAsRequested"'),
])
def test_bad_values_say_what_is_allowed(backend, key, value, problem):
    with pytest.raises(bo.OptionError) as exc:
        bo.validate(backend, {key: value})
    assert f"[tool.perfsuite.backend_options.{backend}] {key} = " in str(exc.value) and problem in str(exc.value)


def test_good_values_pass():
    assert bo.validate("onnxruntime-migraphx", {"fp16": True, "int8": False, "decoder": "static",
                                                "int8_calibration_table": "/t/calibration.flatbuffers",
                                                "model_cache_dir": "/tmp/x", "strict": True}) != {}
    assert bo.validate("vllm", {"awq_group_size": 64})
    assert bo.validate("vllm", {"kv_cache_space_gib": 1, "gpu_memory_utilization": 0.9, "engine_core": "process"})
    assert bo.validate("onnxruntime-cpu", {"graph_optimization_level": "Extended", "provider_options": {"a": 1}})


@pytest.mark.parametrize(("backend", "options", "problem"), [
    # Issue 11: no ORT version's Python API accepts a MIGraphX mem_limit (providers.MIGRAPHX_PYTHON_KEYS)
    ("onnxruntime-migraphx", {"mem_limit": 2**30}, "unknown option for onnxruntime-migraphx"),
    ("onnxruntime-migraphx", {"int8": True}, "must be one of false"),
    ("onnxruntime-cpu", {"decoder": "fixed"}, 'must be one of "dynamic", "static"'),
    ("vllm", {"awq_group_size": 48}, "must be one of 32, 64, 128"),
])
def test_issue11_option_values(backend, options, problem):
    with pytest.raises(bo.OptionError, match=re.escape(problem)):
        bo.validate(backend, options)


def test_repo_backend_options_validate():
    from perfsuite.facts import config as cfg

    conf = cfg.load(ROOT / "pyproject.toml", ROOT)
    for backend, opts in conf.backend_options.items():
        bo.validate(backend, opts)


# ---- cell identity ----------------------------------------------------------------------------------------------
def _cell(backend="onnxruntime-cpu", **options):
    return Cell(backend, "tiny-llama", "float32", SC, options=tuple(sorted(options.items())))


@pytest.mark.parametrize(("backend", "a", "b"), [
    ("onnxruntime-cpu", {}, {"io_binding": True}),
    ("onnxruntime-cpu", {"io_binding": False}, {"io_binding": True}),
    ("onnxruntime-migraphx", {"int8": False}, {"int8": True}),
    ("torch-compile", {}, {"compile_mode": "max-autotune"}),
    ("vllm", {"enforce_eager": True}, {"enforce_eager": False}),
])
def test_options_that_change_the_workload_change_the_hash(backend, a, b):
    ca, cb = _cell(backend, **a), _cell(backend, **b)
    assert ca.id == cb.id and ca.options_hash != cb.options_hash


def test_diagnostic_options_and_model_dir_do_not_change_the_hash():
    base = _cell()
    assert _cell(verify=False, log_placements=True).options_hash == base.options_hash
    assert dataclasses.replace(base, model_dir=Path("/elsewhere")).options_hash == base.options_hash
    assert dataclasses.replace(base, seed=1).options_hash != base.options_hash
    assert dataclasses.replace(base, device="cuda").options_hash != base.options_hash


def test_hash_is_stored_and_stable_across_processes():
    cell = _cell(io_binding=True, threads=2)
    d = cell.as_dict()
    assert d["options_hash"] == cell.options_hash and re.fullmatch(r"[0-9a-f]{12}", d["options_hash"])
    json.dumps(d)
    code = ("from perfsuite.facts.cells import Cell, Scenario; "
            "print(Cell('onnxruntime-cpu', 'tiny-llama', 'float32', Scenario('s', 1, 16, 4), "
            "options=(('io_binding', True), ('threads', 2))).options_hash)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout.strip()
    assert out == cell.options_hash


def test_every_cell_field_is_in_the_id_or_the_hash():
    """A new Cell field must be added to Cell.id or Cell.identity(), or it escapes the gate's comparison."""
    in_id = {"backend", "model", "dtype", "scenario", "quantization", "tensor_parallel_size", "attn_implementation"}
    in_hash = set(_cell().identity())
    in_hash.discard("options")
    assert {f.name for f in dataclasses.fields(Cell)} == in_id | in_hash | {"options", "model_dir"}


def test_hash_of_a_stored_cell_without_the_key_is_recomputable():
    from perfsuite.facts.cells import options_hash_of

    cell = _cell("vllm", enforce_eager=False, kv_cache_space_gib=2)
    stored = json.loads(json.dumps(cell.as_dict()))
    assert options_hash_of(stored) == cell.options_hash
    del stored["options_hash"]  # a baseline recorded before the hash existed
    assert options_hash_of(stored) == cell.options_hash
