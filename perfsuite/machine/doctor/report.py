"""The doctor's human table."""

from __future__ import annotations

from typing import Any

from perfsuite.machine.doctor.core import Report

_MARK = {"ok": "ok   ", "info": "info ", "warn": "WARN ", "error": "ERROR"}


def _gib(b: int | None) -> str:
    return f"{b / 2**30:.1f} GiB" if b else "?"


def _build_line(name: str, b: dict[str, Any]) -> str:
    if name == "torch":
        if not b:
            return "not checked (--no-torch) or not installed"
        extra = f"HIP {b['hip']}" if b.get("hip") else f"CUDA {b['cuda']}" if b.get("cuda") else "CPU-only build"
        archs = f"; arch list: {' '.join(b['arch_list'])}" if b.get("arch_list") else ""
        return f"{b.get('version')} ({extra}){archs}"
    if name == "onnxruntime":
        if not b.get("dists"):
            return "not installed"
        d = ", ".join(f"{k} {v}" for k, v in b["dists"].items())
        prov = ", ".join(b.get("providers", [])) or b.get("error", "?")
        rocm = f"; ROCm EP archs: {' '.join(b['rocm_ep_arch_list'])}" if b.get("rocm_ep_arch_list") else ""
        return f"{d}: {prov}{rocm}"
    if not b.get("dists"):
        return "not installed"
    archs = f"; archs: {' '.join(b['arch_list'])}" if b.get("arch_list") else ""
    return f"{b.get('dist')} {b.get('version')} (target: {b.get('target')}){archs}"


def kernel_rows(kernels: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """One line per kernel probe: name, present/ABSENT/unknown, what the kernel is, what that means for the cells."""
    word = {True: "present", False: "ABSENT", None: "unknown"}
    out = []
    for i, k in enumerate(kernels):
        src = f", {k['source']}" if k.get("source") != "measured" else ""
        out.append(("kernels" if i == 0 else "", f"{k['name']}: {word[k.get('present')]} ({k.get('library')}{src}) - "
                                                  f"{k.get('means')}: {k.get('effect')}; {k.get('detail')}"))
    return out or [("kernels", "not probed (--no-torch)")]


def render(r: Report) -> list[str]:
    c = r.cpu
    lines = [f"perfsuite doctor (device: {r.device})", ""]
    rows: list[tuple[str, str]] = [
        ("CPU", f"{c.get('model')} · {c.get('cores')} cores · {_gib(c.get('memory_total_bytes'))} RAM · "
                f"LLC {_gib(c.get('llc_bytes')) if (c.get('llc_bytes') or 0) >= 2**30 else str((c.get('llc_bytes') or 0) // 2**20) + ' MiB'}"
                + (f" · {' '.join(c['flags'])}" if c.get("flags") else "") + (f" · tier {c['tier']}" if c.get("tier") else "")),
    ]
    if c.get("runner_class"):
        rows.append(("class", f"{c['runner_class']} (the runner class of the CPU cells: baselines/<class>/)"))
    gpu_rows = [(f"GPU {g.index}", f"{g.name or '?'} · {g.arch or 'arch ?'} · {_gib(g.vram_bytes)} · "
                                   f"driver {g.driver or '?'} · from {g.source}") for g in r.gpus]
    rows += gpu_rows or [("GPU", "none found")]
    rows.append(("sources", ", ".join(f"{s.name}: {s.status}" for s in r.sources)))
    if r.runtime:
        rows.append(("runtime", ", ".join(f"{k} {v}" for k, v in r.runtime.items())))
    for name in ("torch", "onnxruntime", "vllm"):
        rows.append((name, _build_line(name, r.builds.get(name) or {})))
    rows += kernel_rows(r.kernels)
    rows.append(("env", ", ".join(f"{k}={v}" for k, v in r.env.items()) or "no overrides set"))
    a = r.access
    kfd = a.get("kfd", {})
    acc = [f"/dev/kfd {'openable' if kfd.get('openable') else 'present, not openable' if kfd.get('present') else 'absent'}",
           f"{len(a.get('render_nodes', []))} render node(s)",
           f"container: {a.get('container') or 'no'}"]
    rows.append(("access", ", ".join(acc)))
    width = max(len(k) for k, _ in rows)
    lines += [f"{k:<{width}}  {v}" for k, v in rows]
    lines.append("")
    for f in r.findings:
        lines.append(f"{_MARK.get(f.level, f.level)} [{f.topic}] {f.message}")
        if f.fix:
            lines.append(f"      fix: {f.fix}")
    lines.append("")
    warned = sum(f.level == "warn" for f in r.findings)
    lines.append("blocking problem found (exit 1)" if not r.healthy else
                 f"healthy, with {warned} warning(s) above (exit 0)" if warned else "healthy (exit 0)")
    return lines
