"""Peak device memory of a cell, read at the device level while the cell runs, for every backend (docs/doctor.md,
"Device memory for every backend": why, the readers in order of preference, the ``extra_info`` keys).

A device-level reading sees other processes on the GPU too: the reading at the start (``baseline``) is kept and
``peak_device_delta_bytes`` is what the cell added. The byte keys (:data:`KEYS`) are gateable like the other memory
metrics (exact metrics of perfsuite.verdict.policy).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.machine.doctor import amd_smi_cli, amdsmi_lib, nvidia_smi
from perfsuite.machine.doctor.host import Host

KEYS = ("peak_device_used_bytes", "device_used_baseline_bytes", "peak_device_delta_bytes")


class Reader:
    """A device-level reading of the used memory; ``min_interval_s`` is how often it may be taken."""

    source = ""
    min_interval_s = 0.005

    def used_bytes(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


def physical_indices(indices: Sequence[int], env: Mapping[str, str], vendor: str) -> list[int]:
    """Map runtime ordinals (what torch/vLLM call device 0, 1 ...) to the management library's indices through
    ``*_VISIBLE_DEVICES`` when it is a plain list of integers; otherwise keep them (UUID masks are not mapped)."""
    if vendor == "nvidia":
        masks = [env.get("CUDA_VISIBLE_DEVICES", "")]
    else:  # HIP's mask (CUDA_VISIBLE_DEVICES is its alias) picks among what ROCR's mask left visible
        masks = [env.get("HIP_VISIBLE_DEVICES") or env.get("CUDA_VISIBLE_DEVICES", ""),
                 env.get("ROCR_VISIBLE_DEVICES", "")]
    mapped = list(indices)
    for mask in masks:
        parts = [p.strip() for p in mask.split(",") if p.strip()]
        if parts and all(p.isdigit() for p in parts):
            mapped = [int(parts[i]) if i < len(parts) else i for i in mapped]
    return mapped


class _LibraryReader(Reader):
    """A vendor library held open for the run: ``shutdown`` names the call that releases it."""

    shutdown = ""

    def __init__(self, lib: Any, handles: list[Any]) -> None:
        self.lib, self.handles = lib, handles

    def close(self) -> None:
        with contextlib.suppress(Exception):
            getattr(self.lib, self.shutdown)()


class AmdSmiReader(_LibraryReader):
    """amdsmi Python: ``amdsmi_get_gpu_memory_usage(handle, VRAM)`` is device-wide used VRAM in bytes."""

    source = "amdsmi"
    shutdown = "amdsmi_shut_down"

    def __init__(self, mod: Any, indices: Sequence[int]) -> None:
        mod.amdsmi_init()
        handles = mod.amdsmi_get_processor_handles()
        super().__init__(mod, [handles[i] for i in indices])

    def used_bytes(self) -> int:
        total = 0
        for h in self.handles:
            try:
                total += int(self.lib.amdsmi_get_gpu_memory_usage(h, self.lib.AmdSmiMemoryType.VRAM))
            except AttributeError:  # older amdsmi: {"vram_total": MB, "vram_used": MB}
                total += int(self.lib.amdsmi_get_gpu_vram_usage(h)["vram_used"]) * 2**20
        return total


class NvmlReader(_LibraryReader):
    source = "nvml"
    shutdown = "nvmlShutdown"

    def __init__(self, nv: Any, indices: Sequence[int]) -> None:
        nv.nvmlInit()
        super().__init__(nv, [nv.nvmlDeviceGetHandleByIndex(i) for i in indices])

    def used_bytes(self) -> int:
        return sum(int(self.lib.nvmlDeviceGetMemoryInfo(h).used) for h in self.handles)


class TorchReader(Reader):
    """``torch.cuda.mem_get_info``: device-wide free/total from the HIP/CUDA runtime. It needs a context on the
    device, so it is used only where torch already initialised one (a torch cell), never to start one."""

    source = "torch.cuda.mem_get_info"

    def __init__(self, torch: Any, indices: Sequence[int]) -> None:
        self.torch, self.indices = torch, list(indices)

    def used_bytes(self) -> int:
        return sum(int(cap) - int(free) for free, cap in map(self.torch.cuda.mem_get_info, self.indices))


class AmdSmiCliReader(Reader):
    """``amd-smi metric --mem-usage --csv``: a process per reading (~0.5 s), the fallback without the library."""

    source = "amd-smi metric --csv"
    min_interval_s = 0.5

    def __init__(self, host: Host, indices: Sequence[int]) -> None:
        self.host, self.indices = host, list(indices)

    def used_bytes(self) -> int:
        rc, out, err = self.host.command("amd-smi", "metric", "--mem-usage", "--csv")
        if rc != 0:
            raise RuntimeError(f"amd-smi metric failed: {(err or out).strip()[-200:]}")
        per_gpu = amd_smi_cli.parse_metric_csv(out)
        used = [per_gpu.get(i, (None, None))[0] for i in self.indices]
        if any(u is None for u in used):
            raise RuntimeError(f"amd-smi metric --csv has no used_vram for GPU(s) {self.indices}")
        return sum(u for u in used if u is not None)


def open_reader(device: str, indices: Sequence[int] = (0,), host: Host | None = None) -> tuple[Reader | None, str]:
    """The best device-level reader for ``device`` ("cpu" | "cuda"), or (None, why)."""
    if device == "cpu":
        return None, "cpu: no device memory (peak_rss_bytes covers the CPU cells)"
    host = host or Host()
    amd = host.exists("/sys/class/kfd/kfd/topology/nodes") or host.exists("/dev/kfd")
    name, load, reader_type, vendor = (("amdsmi", amdsmi_lib.load, AmdSmiReader, "amd") if amd
                                       else ("nvml", nvidia_smi.load_nvml, NvmlReader, "nvidia"))
    lib, reason = load()
    if lib is not None:
        try:
            return reader_type(lib, physical_indices(indices, host.env, vendor)), ""
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return TorchReader(torch, indices), ""
    if amd and host.which("amd-smi"):
        return AmdSmiCliReader(host, physical_indices(indices, host.env, "amd")), ""
    return None, f"{name}: {reason}; torch: no initialised GPU context in this process"


@dataclass(frozen=True)
class DeviceMemory:
    source: str | None
    baseline_bytes: int | None
    peak_bytes: int | None
    samples: int
    interval_s: float
    error: str | None = None

    def extra_info(self) -> dict[str, Any]:
        """The ``extra_info`` keys; empty when nothing was measured (the CPU, or no reader)."""
        if self.peak_bytes is None or self.baseline_bytes is None:
            return {}
        return {"peak_device_used_bytes": self.peak_bytes, "device_used_baseline_bytes": self.baseline_bytes,
                "peak_device_delta_bytes": self.peak_bytes - self.baseline_bytes,
                "device_memory_source": self.source, "device_memory_samples": self.samples}


class DeviceMemorySampler:
    """``with DeviceMemorySampler("cuda") as s: run the cell`` then ``s.result.extra_info()``. The thread polls
    every ``interval_s`` (at least the reader's floor); readings before and after the block are samples too, so a
    block shorter than one interval still has a peak. A reader that fails mid-run ends the sampling and the error is
    kept; the peak so far stays (a lower bound, marked by ``error``)."""

    def __init__(self, device: str = "cuda", indices: Sequence[int] = (0,), interval_s: float = 0.01,
                 reader: Reader | None = None, host: Host | None = None) -> None:
        self.reader, self.why = (reader, "") if reader is not None else open_reader(device, indices, host)
        self.interval_s = max(interval_s, self.reader.min_interval_s if self.reader else 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="perfsuite-devicemem", daemon=True)
        self._baseline = self._peak = self._n = 0
        self._error: str | None = None
        self.result = DeviceMemory(None, None, None, 0, self.interval_s, self.why or None)

    def _sample(self) -> None:
        assert self.reader is not None
        self._peak = max(self._peak, self.reader.used_bytes())
        self._n += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except Exception as exc:
                self._error = f"{type(exc).__name__}: {exc}"
                return

    def __enter__(self) -> DeviceMemorySampler:
        if self.reader is not None:
            self._baseline = self._peak = self.reader.used_bytes()
            self._n = 1
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.reader is None:
            return
        self._stop.set()
        self._thread.join()
        try:
            self._sample()
        except Exception as err:
            self._error = self._error or f"{type(err).__name__}: {err}"
        self.reader.close()
        self.result = DeviceMemory(self.reader.source, self._baseline, self._peak, self._n, self.interval_s,
                                   self._error)


def default_indices(tensor_parallel_size: int = 1) -> list[int]:
    """The devices a cell uses: 0 .. tp-1 (vLLM places its tensor-parallel workers on the first visible GPUs)."""
    return list(range(max(1, tensor_parallel_size)))

