"""A cell is one point of the benchmark matrix: backend x model x dtype x scenario (+ options)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from perfsuite.facts import identity_hash
from perfsuite.facts.backend_options import workload_items
from perfsuite.facts.presets import PRESETS

DTYPES = ("float32", "bfloat16", "float16")
# int8-static: MIGraphX's calibrated int8 (onnxruntime-migraphx cells; see docs/recipes.md)
QUANTIZATIONS = ("none", "int8-dynamic", "int8-static", "awq")
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Scenario:
    name: str
    batch_size: int
    prompt_tokens: int
    new_tokens: int

    @property
    def slug(self) -> str:
        return f"b{self.batch_size}-p{self.prompt_tokens}-n{self.new_tokens}"


@dataclass(frozen=True)
class Cell:
    backend: str  # e.g. "torch", "torch-compile", "onnxruntime-cpu", "onnxruntime-migraphx", "vllm"
    model: str  # preset name, local directory or hub id
    dtype: str
    scenario: Scenario
    device: str = "cpu"  # "cpu" | "cuda" (a ROCm GPU is "cuda" in torch)
    quantization: str = "none"
    tensor_parallel_size: int = 1
    attn_implementation: str = "sdpa"
    seed: int = 0
    # Backend-specific options from [tool.perfsuite.backend_options.<backend>] (sorted items: hashable).
    options: tuple[tuple[str, Any], ...] = ()
    # Set where the model is materialised (the worker process, perfsuite.measure.worker.child; perfsuite overhead); not
    # part of the id or of equality.
    model_dir: Path | None = field(default=None, compare=False)

    @property
    def id(self) -> str:
        parts = [self.backend, model_slug(self.model), self.dtype, self.scenario.slug]
        if self.quantization != "none":
            parts.append(self.quantization)
        if self.tensor_parallel_size != 1:
            parts.append(f"tp{self.tensor_parallel_size}")
        if self.attn_implementation != "sdpa":
            parts.append(f"attn-{self.attn_implementation}")
        return "-".join(parts)

    def option(self, key: str, default: Any = None) -> Any:
        return dict(self.options).get(key, default)

    def identity(self) -> dict[str, Any]:
        """What changes the timed workload but is not in :attr:`id`: the backend options that change what runs
        (perfsuite.facts.backend_options marks diagnostics-only ones), the device and the seed of the prompts."""
        return identity_of(self.as_dict(hashed=False))

    @property
    def options_hash(self) -> str:
        """12 hex digits over :meth:`identity`: two runs of one cell id compare only if their hashes agree. Options
        are hashed as given (``io_binding = false`` written out and left to its default differ): a valid comparison
        may be refused, an invalid one is never allowed."""
        return options_hash_of(self.as_dict(hashed=False))

    def as_dict(self, hashed: bool = True) -> dict[str, Any]:
        d = asdict(self)  # the scenario too, recursively
        d["options"] = dict(self.options)
        d["model_dir"] = str(self.model_dir) if self.model_dir else None
        d["id"] = self.id
        if hashed:
            d["options_hash"] = options_hash_of(d)
        return d


def cell_from_dict(d: Mapping[str, Any]) -> Cell:
    """Inverse of :meth:`Cell.as_dict` (a job's cell, a stored run's ``extra_info["cell"]``); derived keys (``id``,
    hashes) are ignored and recomputed, ``model_dir`` is not carried over."""
    names = {f.name for f in fields(Cell)}
    kw = {k: v for k, v in d.items() if k in names}
    sc = kw["scenario"]
    kw["scenario"] = Scenario(sc["name"], int(sc["batch_size"]), int(sc["prompt_tokens"]), int(sc["new_tokens"]))
    kw["options"] = tuple(sorted(dict(kw.get("options") or {}).items()))
    kw["model_dir"] = None
    return Cell(**kw)


def param_of(item: Any, name: str) -> Any:
    """The value a collected test (a pytest item) is parametrized with for ``name`` (``perf_cell``, ``serve_cell``),
    or None: the one reader of ``item.callspec``."""
    spec = getattr(item, "callspec", None)
    return spec.params.get(name) if spec is not None else None


def cell_of(item: Any) -> Cell | None:
    """The cell a collected perf test is parametrized with (its ``perf_cell``), or None for any other test."""
    cell = param_of(item, "perf_cell")
    return cell if isinstance(cell, Cell) else None


def identity_of(cell: dict[str, Any]) -> dict[str, Any]:
    """:meth:`Cell.identity` of a stored cell (``extra_info["cell"]``, a :meth:`Cell.as_dict`)."""
    return {"options": workload_items(str(cell.get("backend")), dict(cell.get("options") or {})),
            "device": cell.get("device", "cpu"), "seed": cell.get("seed", 0)}


def options_hash_of(cell: dict[str, Any]) -> str:
    """The options hash of a stored cell; the same as ``Cell.options_hash``, so a file written before the hash was
    stored (no ``options_hash`` key) can be checked by recomputing it from its ``options``, ``device`` and ``seed``."""
    return identity_hash(identity_of(cell))


def model_slug(model: str) -> str:
    """Preset names stay as they are; paths and hub ids become their last component, with ``local-`` in front when
    that component is a preset's name (``./m/tiny-llama`` -> ``local-tiny-llama``): another model must not read as
    the preset, share its baselines' test names, or be merged with it when both are selected."""
    slug = model.rstrip("/").rsplit("/", 1)[-1].replace("_", "-").lower()
    return f"local-{slug}" if model not in PRESETS and slug in PRESETS else slug
