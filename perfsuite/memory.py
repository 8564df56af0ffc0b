"""Peak resident memory of this process, resettable per cell (Linux ``clear_refs``)."""

from __future__ import annotations

import resource
import sys


def reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark (VmHWM); False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
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
    if pid == "self":
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss if sys.platform == "darwin" else rss * 1024
    return None
