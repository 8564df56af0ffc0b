"""The device's limits, measured when a run starts (in a worker, like every other number): the copy bandwidth of
DRAM (or device memory), a matmul's FLOP/s and, on the CPU, the copy bandwidth within the last-level cache.

* the copy kernel moves 2 x N bytes for an N-byte copy (read + write: the STREAM convention).
* the cache copy's buffers are LLC/4 each, so the pair fits the cache with room for the rest; the LLC size is read
  from sysfs by the doctor's reader (CPU 0's largest cache), and is a parameter everywhere (tests inject it).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from perfsuite.facts.model_shape import DTYPE_BYTES


@dataclass(frozen=True)
class Measured:
    value: float  # best of the repeats (bytes/s or FLOP/s)
    median: float
    nbytes: int
    repeats: int
    method: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _available_memory_bytes() -> int | None:
    from perfsuite.machine.doctor import cpu
    from perfsuite.machine.doctor.host import Host

    return cpu.meminfo_bytes(Host(), "MemAvailable")


def cpu_copy_nbytes(llc_bytes: int | None = None) -> int:
    """One buffer of the copy: twice the last-level cache (the pair then is 4x it), 256 MiB .. 1 GiB, and never more
    than an eighth of the available memory."""
    if llc_bytes is None:
        llc_bytes = llc_bytes_here() or 32 * 2**20
    n = min(max(2 * llc_bytes, 256 * 2**20), 2**30)
    avail = _available_memory_bytes()
    if avail:
        n = min(n, avail // 8)
    return max(n - n % 4096, 4096)


def measure_copy_bandwidth(device: str = "cpu", nbytes: int | None = None, repeats: int = 5) -> Measured:
    """Device memory bandwidth from a large copy (``dst.copy_(src)``; torch's copy uses all intra-op threads on the
    CPU). Best of ``repeats`` after one warm-up, counting 2 x nbytes per copy."""
    import torch

    if device == "cpu":
        nbytes = nbytes or cpu_copy_nbytes()
    else:
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        nbytes = nbytes or int(min(2 * 2**30, max(256 * 2**20, free // 8)))
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    rates = []
    for i in range(repeats + 1):
        if device == "cpu":
            t0 = time.perf_counter()
            dst.copy_(src)
            dt = time.perf_counter() - t0
        else:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            dt = start.elapsed_time(end) / 1e3
        if i > 0:  # the first copy pays page faults (CPU) / lazy allocation
            rates.append(2 * n * 4 / dt)
    del src, dst
    how = (f"2 x {n * 4 / 2**20:.0f} MiB float32 on {device} ({torch.get_num_threads()} threads)" if device == "cpu"
           else f"{n * 4 / 2**20:.0f} MiB on {device}, CUDA/HIP events")
    return Measured(max(rates), statistics.median(rates), n * 4, repeats, f"torch copy_ of {how}")


def measure_matmul_flops(device: str = "cpu", dtype: str = "float32", n: int | None = None,
                         repeats: int = 3) -> Measured:
    """A square matmul's FLOP/s (2 n^3 per product): the measured compute peak the prefill is compared with."""
    import torch

    n = n or (1024 if device == "cpu" else 8192)
    a = torch.randn(n, n, dtype=getattr(torch, dtype), device=device)
    b = torch.randn(n, n, dtype=getattr(torch, dtype), device=device)
    sync = torch.cuda.synchronize if device != "cpu" else lambda device: None
    rates = []
    for i in range(repeats + 1):
        sync(device)
        t0 = time.perf_counter()
        torch.matmul(a, b)
        sync(device)
        dt = time.perf_counter() - t0
        if i > 0:
            rates.append(2 * n**3 / dt)
    return Measured(max(rates), statistics.median(rates), 3 * n * n * DTYPE_BYTES[dtype], repeats,
                    f"torch.matmul {n}x{n} {dtype} on {device}")


def measure_peaks(device: str, dtype: str, llc_bytes: int | None = None) -> dict[str, Any]:
    """What the lead's run start records once per device: copy bandwidth and matmul peak; on the CPU also the LLC
    size and the copy bandwidth within it (the reference of cache-resident cells)."""
    bw = measure_copy_bandwidth(device)
    mm = measure_matmul_flops(device, dtype if device != "cpu" else "float32")
    cache = cache_peaks(llc_bytes) if device == "cpu" else {}
    return {"copy_bandwidth_bytes_per_s": bw.value, "copy_bandwidth": bw.as_dict(),
            "matmul_flops_per_s": mm.value, "matmul": mm.as_dict(), **cache, "pid": os.getpid()}


CACHE_FRACTION = 4  # each buffer of the cache copy is LLC/4: the pair takes half the cache, leaving room for the rest


def llc_bytes_here() -> int | None:
    from perfsuite.machine.doctor import cpu
    from perfsuite.machine.doctor.host import Host

    return cpu.last_level_cache_bytes(Host())


def cache_copy_nbytes(llc_bytes: int) -> int:
    n = llc_bytes // CACHE_FRACTION
    return max(n - n % 4096, 64 * 2**10)


def measure_cache_bandwidth(llc_bytes: int, repeats: int = 30, min_sample_s: float = 0.0005,
                            budget_s: float = 0.5) -> Any:
    """Copy bandwidth within the last-level cache: ``dst.copy_(src)`` of LLC/4-byte buffers, ``k`` copies per sample
    (k chosen so one sample takes >= ``min_sample_s``), best sample after a warm-up; 2 x nbytes per copy, as the DRAM
    copy counts. At least ``repeats`` samples, and more until ``budget_s`` is spent: on a busy machine a descheduled
    OpenMP thread stalls a copy this small by a scheduler slice, and the best sample is one that ran undisturbed."""
    import torch

    nbytes = cache_copy_nbytes(llc_bytes)
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)

    def timed() -> float:  # seconds for k copies
        t0 = time.perf_counter()
        for _ in range(k):
            dst.copy_(src)
        return time.perf_counter() - t0

    k = 1
    while timed() < min_sample_s and k < 1 << 20:  # warm-up, and the number of copies per sample
        k *= 2
    rates: list[float] = []
    end = time.perf_counter() + budget_s
    while len(rates) < repeats or (time.perf_counter() < end and len(rates) < 100 * repeats):
        rates.append(2 * nbytes * k / timed())
    return Measured(max(rates), statistics.median(rates), nbytes, len(rates),
                    f"torch copy_ of 2 x {nbytes / 2**20:.2f} MiB float32 (fits the {llc_bytes / 2**20:.0f} MiB LLC), "
                    f"{k} copies per sample, best of {len(rates)} ({torch.get_num_threads()} threads)")


def cache_peaks(llc_bytes: int | None = None) -> dict[str, Any]:
    """The run-start cache references of a CPU: LLC size and the copy bandwidth within it."""
    llc = llc_bytes if llc_bytes is not None else llc_bytes_here()
    if not llc:
        return {"llc_bytes": None}
    m = measure_cache_bandwidth(llc)
    return {"llc_bytes": llc, "cache_copy_bandwidth_bytes_per_s": m.value, "cache_copy_bandwidth": m.as_dict()}
