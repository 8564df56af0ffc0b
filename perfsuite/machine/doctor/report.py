"""The doctor's human table."""

from __future__ import annotations

from typing import Any

from perfsuite.machine.doctor.core import Report

_MARK = {"ok": "ok   ", "info": "info ", "warn": "WARN ", "error": "ERROR"}


def _gib(b: int | None) -> str:
    return f"{b / 2**30:.1f} GiB" if b else "?"


def _build_line(name: str, b: dict[str, Any]) -> str:
    if name == "torch" and not b:
        return "not checked (--no-torch) or not installed"
    if name == "torch":
        extra = f"HIP {b['hip']}" if b.get("hip") else f"CUDA {b['cuda']}" if b.get("cuda") else "CPU-only build"
        archs = f"; arch list: {' '.join(b['arch_list'])}" if b.get("arch_list") else ""
        return f"{b.get('version')} ({extra}){archs}"
    if not b.get("dists"):
        return "not installed"
    if name == "onnxruntime":
        rocm = f"; ROCm EP archs: {' '.join(b['rocm_ep_arch_list'])}" if b.get("rocm_ep_arch_list") else ""
        return (f"{', '.join(f'{k} {v}' for k, v in b['dists'].items())}: "
                f"{', '.join(b.get('providers', [])) or b.get('error', '?')}{rocm}")
    archs = f"; archs: {' '.join(b['arch_list'])}" if b.get("arch_list") else ""
    return f"{b.get('dist')} {b.get('version')} (target: {b.get('target')}){archs}"


def kernel_rows(kernels: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """One line per kernel probe: name, present/ABSENT/unknown, what the kernel is, what that means for the cells."""
    word = {True: "present", False: "ABSENT", None: "unknown"}
    rows = [f"{k['name']}: {word[k.get('present')]} ({k.get('library')}"
            + (f", {k['source']}" if k.get("source") != "measured" else "")
            + f") - {k.get('means')}: {k.get('effect')}; {k.get('detail')}" for k in kernels]
    return [("" if i else "kernels", row) for i, row in enumerate(rows)] or [("kernels", "not probed (--no-torch)")]


def render(r: Report) -> list[str]:
    c, a = r.cpu, r.access
    llc = c.get("llc_bytes") or 0
    kfd = a.get("kfd", {})
    kfd_state = "openable" if kfd.get("openable") else "present, not openable" if kfd.get("present") else "absent"
    rows = [("CPU", f"{c.get('model')} · {c.get('cores')} cores · {_gib(c.get('memory_total_bytes'))} RAM · "
                    f"LLC {_gib(llc) if llc >= 2**30 else f'{llc // 2**20} MiB'}"
                    + (f" · {' '.join(c['flags'])}" if c.get("flags") else "")
                    + (f" · tier {c['tier']}" if c.get("tier") else ""))]
    if c.get("runner_class"):
        rows.append(("class", f"{c['runner_class']} (the runner class of the CPU cells: baselines/<class>/)"))
    rows += [(f"GPU {g.index}", f"{g.name or '?'} · {g.arch or 'arch ?'} · {_gib(g.vram_bytes)} · driver "
                                f"{g.driver or '?'} · from {g.source}") for g in r.gpus] or [("GPU", "none found")]
    rows.append(("sources", ", ".join(f"{s.name}: {s.status}" for s in r.sources)))
    if r.runtime:
        rows.append(("runtime", ", ".join(f"{k} {v}" for k, v in r.runtime.items())))
    rows += [(name, _build_line(name, r.builds.get(name) or {})) for name in ("torch", "onnxruntime", "vllm")]
    rows += kernel_rows(r.kernels)
    rows.append(("env", ", ".join(f"{k}={v}" for k, v in r.env.items()) or "no overrides set"))
    rows.append(("access", f"/dev/kfd {kfd_state}, {len(a.get('render_nodes', []))} render node(s), "
                           f"container: {a.get('container') or 'no'}"))
    width = max(len(k) for k, _ in rows)
    lines = [f"perfsuite doctor (device: {r.device})", "", *(f"{k:<{width}}  {v}" for k, v in rows), ""]
    for f in r.findings:
        lines += [f"{_MARK.get(f.level, f.level)} [{f.topic}] {f.message}", *([f"      fix: {f.fix}"] if f.fix else [])]
    warned = sum(f.level == "warn" for f in r.findings)
    return [*lines, "", "blocking problem found (exit 1)" if not r.healthy else
            f"healthy, with {warned} warning(s) above (exit 0)" if warned else "healthy (exit 0)"]
