"""``[tool.perfsuite]`` -> frozen dataclasses, resolved once per session. Precedence: CLI option > ``PERFSUITE_*`` env
> ``perfsuite_*`` ini key > ``[tool.perfsuite]`` > dataclass default. Every invalid key or value raises
:class:`ConfigError` naming the key and what is allowed (the plugin makes it a ``pytest.UsageError``)."""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from perfsuite.facts import backend_options, schema
from perfsuite.facts.backend_options import known_backends
from perfsuite.facts.cells import DEVICES, DTYPES, QUANTIZATIONS, Cell, Scenario
from perfsuite.facts.errors import reraise_as
from perfsuite.facts.schema import Field, first_unknown

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROFILES = ("smoke", "pr", "nightly")
ATTN = ("sdpa", "eager")


class ConfigError(ValueError):
    """Invalid configuration; the message names the key, the allowed values and the fix."""


@dataclass(frozen=True)
class Profile:
    name: str
    backends: tuple[str, ...]
    models: tuple[str, ...]
    dtypes: tuple[str, ...] = ("float32",)
    scenarios: tuple[str, ...] = ("short",)
    quantizations: tuple[str, ...] = ("none",)
    tensor_parallel_sizes: tuple[int, ...] = (1,)
    attn_implementations: tuple[str, ...] = ("sdpa",)
    warmup_generations: int = 1  # untimed generations before the timed ones, per test
    generations: int = 5  # timed generations per test (TTFT/E2E rounds; TPOT rounds = generations * (n - 1))
    # Fresh worker processes that each measure a cell (the unit of the gate); 0 = in the pytest process.
    worker_processes: int = 10
    # Per-backend override, e.g. {"vllm": 2}: engines that take seconds to start use fewer.
    worker_processes_by_backend: tuple[tuple[str, int], ...] = ()
    # Cells beyond the cross product of the axes (e.g. one vLLM TP=2 and one AWQ cell): (backend, model, dtype,
    # scenario, quantization, tensor_parallel_size, attn_implementation); see _extra_cells.
    cells: tuple[tuple[str, str, str, str, str, int, str], ...] = ()


@dataclass(frozen=True)
class LoadPolicy:
    """``[tool.perfsuite.preflight]``: thresholds, in cores, above which a machine is busy, and what a recording
    run does then (``refuse``: record nothing; ``mark``: record, with the load sample in the run's machine_info)."""

    max_other_cores: float = 0.25
    max_steal_cores: float = 0.25
    interval_s: float = 0.5
    on_busy: str = "refuse"


@dataclass(frozen=True)
class PerfConfig:
    root: Path
    baselines_dir: Path
    cache_dir: Path | None
    scenarios: Mapping[str, Scenario]
    profiles: Mapping[str, Profile]
    backend_options: Mapping[str, Mapping[str, Any]]
    gate: Mapping[str, Any] = field(default_factory=dict)  # parsed by perfsuite.verdict
    preflight: LoadPolicy = field(default_factory=LoadPolicy)  # [tool.perfsuite.preflight]
    roofline: bool = True  # measure the run-start peaks (copy bandwidth, matmul FLOP/s): ~8 s a run on 2 CPU cores


@dataclass(frozen=True)
class Settings:
    """What this session runs: the config plus the resolved options."""

    config: PerfConfig
    profile: Profile
    device: str
    runner_class: str
    update_baselines: bool
    backends: tuple[str, ...]
    models: tuple[str, ...]
    workers: int | None = None  # --perf-workers: overrides the profile for every backend
    # cell id -> why its scenario does not fit its model's context (models.check_fits): skip these cells.
    unfit: Mapping[str, str] = field(default_factory=dict)

    def workers_for(self, backend: str) -> int:
        if self.workers is not None:
            return self.workers
        return dict(self.profile.worker_processes_by_backend).get(backend, self.profile.worker_processes)

    def cells(self) -> list[Cell]:
        p = self.profile
        axes = itertools.product(self.backends, self.models, p.dtypes, p.scenarios, p.quantizations,
                                 p.tensor_parallel_sizes, p.attn_implementations)
        extra = [c for c in p.cells  # a --perf-backend / --perf-model filter applies
                 if (self.backends == p.backends or c[0] in self.backends)
                 and (self.models == p.models or c[1] in self.models)]
        seen: dict[str, Cell] = {}  # the first cell of each id
        for backend, model, dtype, sc, q, tp, attn in [*axes, *extra]:
            opts = tuple(sorted(self.config.backend_options.get(backend, {}).items()))
            cell = Cell(backend, model, dtype, self.config.scenarios[sc], self.device, q, tp, attn, options=opts)
            seen.setdefault(cell.id, cell)
        return list(seen.values())


# "history" is read by perfsuite.orchestrate.history (the run database's path), "serving" by
# perfsuite.measure.serving.cell (serving cells' load points); listed here so they are not unknown keys.
_TOP_KEYS = {"baselines_dir", "cache_dir", "scenarios", "profiles", "backend_options", "gate", "preflight", "history",
             "serving", "roofline"}
_PREFLIGHT_FIELDS = {
    "max_other_cores": Field("float", "cores busy outside this run that the start tolerates", minimum=0.0,
                             maximum=1024.0),
    "max_steal_cores": Field("float", "cores of hypervisor steal that the start tolerates", minimum=0.0,
                             maximum=1024.0),
    "load_sample_s": Field("float", "length of the start's load sample", minimum=0.05, maximum=10.0),
    "on_busy": Field("str", "what a busy machine does to the run", choices=("refuse", "mark")),
}
_SCENARIO_FIELDS = {
    "batch_size": Field("int", "requests per step", minimum=1),
    "prompt_tokens": Field("int", "tokens of each prompt", minimum=1),
    "new_tokens": Field("int", "generated tokens (TPOT needs two)", minimum=2),
}
_PROFILE_INTS = {"warmup_generations": Field("int", minimum=0), "generations": Field("int", minimum=1),
                 "worker_processes": Field("int", minimum=0)}
_PROFILE_KEYS = {f for f in Profile.__dataclass_fields__ if f != "name"}
_CELL_KEYS = {"backend", "model", "dtype", "scenario", "quantization", "tensor_parallel_size", "attn_implementation"}


def _extra_cells(sec: str, value: Any, scenarios: Mapping[str, Scenario],
                 backends: tuple[str, ...]) -> tuple[tuple[str, str, str, str, str, int, str], ...]:
    """``cells = [{ backend = "vllm", model = "tiny-llama", dtype = "bfloat16", scenario = "short",
    quantization = "awq" }, ...]``: explicit cells added to the profile's cross product."""
    _expect(isinstance(value, list), f"{_where(sec, 'cells')} must be a list of inline tables")
    out = []
    for i, c in enumerate(value):
        where = f"{sec}.cells[{i}]"
        _expect(isinstance(c, Mapping), f"{_where(where, '')} must be a table")
        _unknown(where, set(c), _CELL_KEYS)
        missing = sorted({"backend", "model", "dtype", "scenario"} - set(c))
        _expect(not missing, f"{_where(where, missing[0]) if missing else ''}: missing (a cell needs backend, model, "
                             "dtype and scenario)")
        _checked(where, "backend", c["backend"], Field("str", choices=backends))
        _checked(where, "dtype", c["dtype"], Field("str", choices=DTYPES))
        _checked(where, "scenario", c["scenario"], Field("str", choices=tuple(scenarios)))
        q = _checked(where, "quantization", c.get("quantization", "none"), Field("str", choices=QUANTIZATIONS))
        attn = _checked(where, "attn_implementation", c.get("attn_implementation", "sdpa"), Field("str", choices=ATTN))
        tp = _pos_int(where, "tensor_parallel_size", c.get("tensor_parallel_size", 1))
        out.append((str(c["backend"]), str(c["model"]), str(c["dtype"]), str(c["scenario"]), str(q), tp, str(attn)))
    return tuple(out)


def _where(section: str, key: str) -> str:
    return f"[tool.perfsuite{'.' + section if section else ''}] {key}"


def _expect(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def _unknown(section: str, keys: set[str], allowed: set[str]) -> None:
    bad = first_unknown(keys, allowed)
    _expect(bad is None, f"{_where(section, str(bad))}: unknown key; allowed: {', '.join(sorted(allowed))}")


def _checked(section: str, key: str, value: Any, spec: Field) -> Any:
    return schema.checked(_where(section, key), value, spec, ConfigError)


def _str_list(section: str, key: str, value: Any, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    return tuple(_checked(section, key, value, Field("strs", choices=allowed)))


def _pos_int(section: str, key: str, value: Any, minimum: int = 1) -> int:
    return int(_checked(section, key, value, Field("int", minimum=minimum)))


def find_pyproject(start: Path) -> Path | None:
    for d in [start, *start.parents]:
        p = d / "pyproject.toml"
        if p.is_file():
            try:
                if "perfsuite" in tomllib.loads(p.read_text()).get("tool", {}):
                    return p
            except tomllib.TOMLDecodeError:
                return p  # let load() report the syntax error
    return None


def load(pyproject: Path | None, root: Path) -> PerfConfig:
    """Parse ``[tool.perfsuite]``; a missing table gives the built-in default matrix."""
    raw: dict[str, Any] = {}
    if pyproject is not None:
        try:
            raw = tomllib.loads(pyproject.read_text()).get("tool", {}).get("perfsuite", {})
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{pyproject}: malformed TOML ({exc}); fix the file") from exc
        root = pyproject.parent
    return parse(raw, root)


def parse(raw: Mapping[str, Any], root: Path) -> PerfConfig:
    _expect(isinstance(raw, Mapping), "[tool.perfsuite] must be a table")
    _unknown("", set(raw), _TOP_KEYS)
    scenarios: dict[str, Scenario] = {"short": Scenario("short", 1, 64, 32)}
    for name, sc in raw.get("scenarios", {}).items():
        sec = f"scenarios.{name}"
        _expect(isinstance(sc, Mapping), f"{_where('scenarios', name)} must be a table")
        _unknown(sec, set(sc), set(_SCENARIO_FIELDS))
        missing = _SCENARIO_FIELDS.keys() - set(sc)
        _expect(not missing, f"{_where(sec, sorted(missing)[0]) if missing else ''}: missing (a scenario needs "
                             "batch_size, prompt_tokens and new_tokens)")
        scenarios[name] = Scenario(name, *(int(_checked(sec, k, sc[k], f)) for k, f in _SCENARIO_FIELDS.items()))
    profiles: dict[str, Profile] = {}
    raw_profiles = raw.get("profiles", {})
    _unknown("profiles", set(raw_profiles), set(PROFILES))
    for name in PROFILES:
        pr = raw_profiles.get(name, {})
        sec = f"profiles.{name}"
        _unknown(sec, set(pr), _PROFILE_KEYS)
        kw: dict[str, Any] = {}
        kw["backends"] = _str_list(sec, "backends", pr.get("backends", ["torch"]), known_backends())
        kw["models"] = _str_list(sec, "models", pr.get("models", ["tiny-llama"]))
        for key, allowed in (("dtypes", DTYPES), ("scenarios", tuple(scenarios)), ("quantizations", QUANTIZATIONS),
                             ("attn_implementations", ATTN)):
            if key in pr:
                kw[key] = _str_list(sec, key, pr[key], allowed)
        if "tensor_parallel_sizes" in pr:
            v = pr["tensor_parallel_sizes"]
            _expect(isinstance(v, list) and bool(v),
                    f"{_where(sec, 'tensor_parallel_sizes')} must be a list of integers")
            kw["tensor_parallel_sizes"] = tuple(_pos_int(sec, "tensor_parallel_sizes", t) for t in v)
        for k, spec in _PROFILE_INTS.items():
            if k in pr:
                kw[k] = _checked(sec, k, pr[k], spec)
        if "worker_processes_by_backend" in pr:
            v = pr["worker_processes_by_backend"]
            _expect(isinstance(v, Mapping), f"{_where(sec, 'worker_processes_by_backend')} must be a table "
                                            "backend = processes, e.g. { vllm = 2 }")
            for b in v:
                _expect(b in known_backends(), f"{_where(sec, 'worker_processes_by_backend')}: {b!r} is not one of "
                                               f"{', '.join(known_backends())}")
            kw["worker_processes_by_backend"] = tuple(sorted(
                (b, _pos_int(sec, f"worker_processes_by_backend.{b}", n, minimum=0)) for b, n in v.items()))
        if "cells" in pr:
            kw["cells"] = _extra_cells(sec, pr["cells"], scenarios, known_backends())
        profiles[name] = Profile(name, **kw)
    opts = raw.get("backend_options", {})
    _expect(isinstance(opts, Mapping), "[tool.perfsuite.backend_options] must be a table of tables, one per backend")
    _unknown("backend_options", set(opts), set(known_backends()))
    for backend, table in opts.items():
        _expect(isinstance(table, Mapping), f"{_where('backend_options', backend)} must be a table of options")
        with reraise_as(ConfigError, backend_options.OptionError):
            backend_options.validate(backend, table)
    cache = raw.get("cache_dir")
    preflight = _preflight(raw.get("preflight", {}))
    return PerfConfig(root=root, baselines_dir=root / str(raw.get("baselines_dir", "baselines")),
                      cache_dir=(root / cache) if cache else None, scenarios=MappingProxyType(scenarios),
                      profiles=MappingProxyType(profiles),
                      backend_options=MappingProxyType({k: MappingProxyType(dict(v)) for k, v in opts.items()}),
                      gate=MappingProxyType(dict(raw.get("gate", {}))), preflight=preflight,
                      roofline=_checked("", "roofline", raw.get("roofline", True),
                                        Field("bool", "measure the run-start roofline references")))


def _preflight(raw: Any) -> LoadPolicy:
    _expect(isinstance(raw, Mapping), "[tool.perfsuite.preflight] must be a table")
    _unknown("preflight", set(raw), set(_PREFLIGHT_FIELDS))
    kw: dict[str, Any] = {}
    for key, spec in _PREFLIGHT_FIELDS.items():
        if key in raw:
            v = _checked("preflight", key, raw[key], spec)
            kw["interval_s" if key == "load_sample_s" else key] = v if key == "on_busy" else float(v)
    return LoadPolicy(**kw)


def pick(cli: Any, env_name: str, ini: Any, default: Any) -> Any:
    """CLI > env > ini > default (the pyproject default is passed in as ``default``)."""
    for value in (cli, os.environ.get(env_name), ini):
        if value not in (None, "", []):
            return value
    return default


def resolve(config: PerfConfig, *, profile: str, device: str, backends: str | None, models: str | None,
            runner_class: str, update_baselines: bool, workers: str | int | None = None) -> Settings:
    """Validate the options against the config. Models are checked here too (config.json, no custom code) and each
    cell's scenario against its model's context; cells that do not fit are listed in ``Settings.unfit``."""
    from perfsuite.facts import models as model_registry
    from perfsuite.facts.runner_name import validate as valid_runner_class

    _expect(profile in config.profiles,
            f"--perf-profile {profile!r}: unknown profile; use one of {', '.join(PROFILES)}")
    _expect(device in DEVICES, f"--perf-device {device!r}: use one of {', '.join(DEVICES)} (a ROCm GPU is 'cuda')")
    with reraise_as(ConfigError, ValueError):
        rc = valid_runner_class(runner_class, "runner class (--perf-runner-class, PERFSUITE_RUNNER_CLASS or ini "
                                              "perfsuite_runner_class)")
    prof = config.profiles[profile]
    bk = tuple(b.strip() for b in backends.split(",") if b.strip()) if backends else prof.backends
    for b in bk:
        _expect(b in known_backends(),
                f"--perf-backend {b!r}: unknown backend; use one of {', '.join(known_backends())}")
    md = tuple(m.strip() for m in models.split(",") if m.strip()) if models else prof.models
    configs = {}
    for m in md:
        _expect(model_registry.known_model(m),
                f"--perf-model {m!r}: unknown model; use {model_registry.describe_models()}")
        try:
            configs[m] = model_registry.model_config(m, config.cache_dir)
        except model_registry.ModelError as exc:
            raise ConfigError(f"model {m!r}: {exc}") from None
    w: int | None = None
    if workers not in (None, ""):
        try:
            w = int(str(workers))
        except ValueError:
            w = -1
        _expect(w >= 0, f"--perf-workers {workers!r}: use a whole number of worker processes >= 0 (0 = measure in "
                        "the pytest process)")
    settings = Settings(config, prof, device, rc, update_baselines, bk, md, w)
    cells = settings.cells()
    unfit = {c.id: why for c in cells if (why := model_registry.check_fits(c, config=configs[c.model]))}
    _expect(not cells or len(unfit) < len(cells),
            f"no cell of this selection fits its model: {next(iter(unfit.values()), '')}")
    return dataclasses.replace(settings, unfit=MappingProxyType(unfit))
