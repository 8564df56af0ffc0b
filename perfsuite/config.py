"""``[tool.perfsuite]`` -> frozen dataclasses, resolved once per session.

Precedence, written down once: CLI option > ``PERFSUITE_*`` env > ``perfsuite_*`` ini key > ``[tool.perfsuite]``
> dataclass default. Every invalid key or value raises :class:`ConfigError` naming the key and what is allowed;
the plugin turns it into ``pytest.UsageError``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from perfsuite.cells import DEVICES, DTYPES, QUANTIZATIONS, Cell, Scenario

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
    # Cells beyond the cross product of the axes (e.g. one vLLM TP=2 and one AWQ cell): (backend, model, dtype,
    # scenario, quantization, tensor_parallel_size, attn_implementation); see _extra_cells.
    cells: tuple[tuple[str, str, str, str, str, int, str], ...] = ()


@dataclass(frozen=True)
class PerfConfig:
    root: Path
    baselines_dir: Path
    cache_dir: Path | None
    scenarios: Mapping[str, Scenario]
    profiles: Mapping[str, Profile]
    backend_options: Mapping[str, Mapping[str, Any]]
    gate: Mapping[str, Any] = field(default_factory=dict)  # parsed by perfsuite.gate


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

    def cells(self) -> list[Cell]:
        p = self.profile
        out = []
        for backend in self.backends:
            opts = tuple(sorted(self.config.backend_options.get(backend, {}).items()))
            for model in self.models:
                for dtype in p.dtypes:
                    for sc in p.scenarios:
                        for q in p.quantizations:
                            for tp in p.tensor_parallel_sizes:
                                for attn in p.attn_implementations:
                                    out.append(Cell(backend, model, dtype, self.config.scenarios[sc], self.device,
                                                    q, tp, attn, options=opts))
        for backend, model, dtype, sc, q, tp, attn in p.cells:  # the --perf-backend / --perf-model filters apply
            if backend in self.backends and model in self.models:
                opts = tuple(sorted(self.config.backend_options.get(backend, {}).items()))
                out.append(Cell(backend, model, dtype, self.config.scenarios[sc], self.device, q, tp, attn,
                                options=opts))
        return _dedupe(out)


def _dedupe(cells: list[Cell]) -> list[Cell]:
    seen: dict[str, Cell] = {}
    for c in cells:
        seen.setdefault(c.id, c)
    return list(seen.values())


_TOP_KEYS = {"baselines_dir", "cache_dir", "scenarios", "profiles", "backend_options", "gate"}
_SCENARIO_KEYS = {"batch_size", "prompt_tokens", "new_tokens"}
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
        _expect(c["backend"] in backends, f"{_where(where, 'backend')}: {c['backend']!r} is not one of "
                                          f"{', '.join(backends)}")
        _expect(c["dtype"] in DTYPES, f"{_where(where, 'dtype')}: {c['dtype']!r} is not one of {', '.join(DTYPES)}")
        _expect(c["scenario"] in scenarios, f"{_where(where, 'scenario')}: {c['scenario']!r} is not one of "
                                            f"{', '.join(scenarios)}")
        q = c.get("quantization", "none")
        _expect(q in QUANTIZATIONS, f"{_where(where, 'quantization')}: {q!r} is not one of {', '.join(QUANTIZATIONS)}")
        attn = c.get("attn_implementation", "sdpa")
        _expect(attn in ATTN, f"{_where(where, 'attn_implementation')}: {attn!r} is not one of {', '.join(ATTN)}")
        tp = _pos_int(where, "tensor_parallel_size", c.get("tensor_parallel_size", 1))
        out.append((str(c["backend"]), str(c["model"]), str(c["dtype"]), str(c["scenario"]), str(q), tp, str(attn)))
    return tuple(out)


def _where(section: str, key: str) -> str:
    return f"[tool.perfsuite{'.' + section if section else ''}] {key}"


def _expect(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def _unknown(section: str, keys: set[str], allowed: set[str]) -> None:
    bad = sorted(keys - allowed)
    _expect(not bad, f"{_where(section, bad[0]) if bad else ''}: unknown key; allowed: {', '.join(sorted(allowed))}")


def _str_list(section: str, key: str, value: Any, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    _expect(isinstance(value, list) and all(isinstance(v, str) for v in value) and bool(value),
            f"{_where(section, key)} must be a non-empty list of strings, got {value!r}")
    if allowed is not None:
        for v in value:
            _expect(v in allowed, f"{_where(section, key)}: {v!r} is not one of {', '.join(allowed)}")
    return tuple(value)


def _pos_int(section: str, key: str, value: Any, minimum: int = 1) -> int:
    _expect(isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
            f"{_where(section, key)} must be an integer >= {minimum}, got {value!r}")
    return int(value)


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
    from perfsuite.backends import known_backends  # registry only: no heavy import

    _expect(isinstance(raw, Mapping), "[tool.perfsuite] must be a table")
    _unknown("", set(raw), _TOP_KEYS)
    scenarios: dict[str, Scenario] = {"short": Scenario("short", 1, 64, 32)}
    for name, sc in raw.get("scenarios", {}).items():
        sec = f"scenarios.{name}"
        _expect(isinstance(sc, Mapping), f"{_where('scenarios', name)} must be a table")
        _unknown(sec, set(sc), _SCENARIO_KEYS)
        missing = _SCENARIO_KEYS - set(sc)
        _expect(not missing, f"{_where(sec, sorted(missing)[0]) if missing else ''}: missing (a scenario needs "
                             "batch_size, prompt_tokens and new_tokens)")
        scenarios[name] = Scenario(name, _pos_int(sec, "batch_size", sc["batch_size"]),
                                   _pos_int(sec, "prompt_tokens", sc["prompt_tokens"]),
                                   _pos_int(sec, "new_tokens", sc["new_tokens"], minimum=2))
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
        if "dtypes" in pr:
            kw["dtypes"] = _str_list(sec, "dtypes", pr["dtypes"], DTYPES)
        if "scenarios" in pr:
            kw["scenarios"] = _str_list(sec, "scenarios", pr["scenarios"], tuple(scenarios))
        if "quantizations" in pr:
            kw["quantizations"] = _str_list(sec, "quantizations", pr["quantizations"], QUANTIZATIONS)
        if "attn_implementations" in pr:
            kw["attn_implementations"] = _str_list(sec, "attn_implementations", pr["attn_implementations"], ATTN)
        if "tensor_parallel_sizes" in pr:
            v = pr["tensor_parallel_sizes"]
            _expect(isinstance(v, list) and bool(v), f"{_where(sec, 'tensor_parallel_sizes')} must be a list of integers")
            kw["tensor_parallel_sizes"] = tuple(_pos_int(sec, "tensor_parallel_sizes", t) for t in v)
        for k in ("warmup_generations", "generations"):
            if k in pr:
                kw[k] = _pos_int(sec, k, pr[k], minimum=0 if k.startswith("warmup") else 1)
        if "cells" in pr:
            kw["cells"] = _extra_cells(sec, pr["cells"], scenarios, known_backends())
        profiles[name] = Profile(name, **kw)
    opts = raw.get("backend_options", {})
    _unknown("backend_options", set(opts), set(known_backends()))
    cache = raw.get("cache_dir")
    return PerfConfig(
        root=root,
        baselines_dir=root / str(raw.get("baselines_dir", "baselines")),
        cache_dir=(root / cache) if cache else None,
        scenarios=MappingProxyType(scenarios),
        profiles=MappingProxyType(profiles),
        backend_options=MappingProxyType({k: MappingProxyType(dict(v)) for k, v in opts.items()}),
        gate=MappingProxyType(dict(raw.get("gate", {}))),
    )


def pick(cli: Any, env_name: str, ini: Any, default: Any) -> Any:
    """CLI > env > ini > default (the pyproject default is passed in as ``default``)."""
    if cli not in (None, "", []):
        return cli
    env = os.environ.get(env_name)
    if env:
        return env
    if ini not in (None, "", []):
        return ini
    return default


def resolve(config: PerfConfig, *, profile: str, device: str, backends: str | None, models: str | None,
            runner_class: str, update_baselines: bool) -> Settings:
    from perfsuite import models as model_registry
    from perfsuite.backends import known_backends

    _expect(profile in config.profiles,
            f"--perf-profile {profile!r}: unknown profile; use one of {', '.join(PROFILES)}")
    _expect(device in DEVICES, f"--perf-device {device!r}: use one of {', '.join(DEVICES)} (a ROCm GPU is 'cuda')")
    prof = config.profiles[profile]
    bk = tuple(b.strip() for b in backends.split(",") if b.strip()) if backends else prof.backends
    for b in bk:
        _expect(b in known_backends(),
                f"--perf-backend {b!r}: unknown backend; use one of {', '.join(known_backends())}")
    md = tuple(m.strip() for m in models.split(",") if m.strip()) if models else prof.models
    for m in md:
        _expect(model_registry.known_model(m),
                f"--perf-model {m!r}: unknown model; use {model_registry.describe_models()}")
    return Settings(config, prof, device, runner_class, update_baselines, bk, md)
