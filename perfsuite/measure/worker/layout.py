"""A fixed address-space layout for the zygotes of an A/B (Linux ``personality(ADDR_NO_RANDOMIZE)``, what
``setarch -R`` does).

Every worker of a side inherits its zygote's layout, which ASLR draws once per zygote; CPython's speed depends on
where objects sit (its type-attribute cache is indexed by the attribute name's address), so two zygotes of identical
code can differ by a fixed amount for a whole run (docs/gate.md). Set in the child between fork and exec, the
personality covers the zygote and its forked and spawned workers; this process keeps its own. LLVM's benchmarking
guide recommends the same; a fixed layout is one draw, not an average over layouts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable

ADDR_NO_RANDOMIZE = 0x0040000
_QUERY = 0xFFFFFFFF


def _personality() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.personality
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_FN = _personality()


def supported() -> bool:
    """Whether this kernel lets a process drop ASLR for what it executes (seccomp may refuse personality)."""
    return not why_not()


def why_not() -> str:
    """Why the layout cannot be fixed here ('' when it can)."""
    if _FN is None:
        return "no personality(2) on this platform"
    if _FN(_QUERY) == -1:
        return "personality(2) refused (a seccomp profile?)"
    return ""


def _fix_in_child() -> None:
    """preexec_fn: runs in the forked child before exec, touches nothing but the one system call."""
    assert _FN is not None
    cur = _FN(_QUERY)
    if cur != -1:
        _FN((cur & 0xFFFFFFFF) | ADDR_NO_RANDOMIZE)


def preexec(fixed: bool) -> Callable[[], None] | None:
    """The ``preexec_fn`` that fixes a child's layout, or None when not asked or not possible."""
    return _fix_in_child if fixed and supported() else None

