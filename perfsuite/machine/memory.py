"""Peak resident memory of this process, resettable per cell (Linux ``clear_refs``).

Imports on every platform: ``resource`` is POSIX-only, so on Windows (the DirectML backend's home) the peak comes
from psutil's ``peak_wset`` (the working set's high-water mark) and is not resettable.
"""

from __future__ import annotations

import sys

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]


def reset_peak_rss(pid: int | str = "self") -> bool:
    """Reset the kernel's RSS high-water mark (VmHWM) of process ``pid``; False where the kernel does not allow it."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes(pid: int | str = "self") -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if pid == "self" and resource is not None:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss if sys.platform == "darwin" else rss * 1024
    return _psutil_peak(None if pid == "self" else int(pid))


def _psutil_peak(pid: int | None) -> int | None:
    """Windows: the working set's peak; elsewhere (no /proc, no resource) the current RSS as a lower bound."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        info = psutil.Process(pid).memory_info()
    except (psutil.Error, OSError):
        return None
    return int(getattr(info, "peak_wset", info.rss))
