"""The doctor end to end: for real on this CPU machine, and on captured AMD/NVIDIA outputs through a fake host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite import cli
from perfsuite.machine import doctor
from perfsuite.machine.doctor import core, rocm_smi, rocminfo
from perfsuite.machine.doctor.facts import SourceResult
from perfsuite.machine.doctor.host import Host

DATA = Path(__file__).parent / "data" / "doctor"
ROCM62 = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030", "gfx1100", "gfx942"]  # 2.5.1+rocm6.2 (uv#14086)


# --------------------------------------------------------------------------------------- this machine, real
def test_cpu_machine_reports_no_gpu_and_is_healthy() -> None:
    r = doctor.collect("auto", use_torch=False)
    if r.gpus:  # pragma: no cover - only on a GPU runner
        pytest.skip(f"this machine has a GPU ({r.gpu_source}); the no-GPU path is tested on CPU machines")
    assert r.healthy and r.exit_code == 0
    assert [f.message for f in r.findings if f.topic == "device"] == ["no GPU: the CPU cells run here "
                                                                      "(--perf-device cpu)"]
    assert r.cpu["cores"] >= 1 and r.cpu["memory_total_bytes"] > 0
    assert {s.name for s in r.sources} >= {"amdsmi", "amd-smi", "rocminfo", "rocm-smi", "kfd-sysfs", "nvml",
                                           "nvidia-smi"}


def test_cuda_requested_without_gpu_is_blocking_with_fix() -> None:
    r = doctor.collect("cuda", use_torch=False)
    if r.gpus:  # pragma: no cover
        pytest.skip("this machine has a GPU")
    [f] = [f for f in r.findings if f.topic == "device"]
    assert f.blocking and "no GPU was found" in f.message and "--device=/dev/kfd" in f.fix
    assert r.exit_code == 1


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["doctor", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_command_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "--json", "--no-torch")
    data = json.loads(out)
    assert code == (0 if data["healthy"] else 1)
    assert {"cpu", "gpus", "sources", "builds", "access", "findings", "env", "runtime"} <= set(data)
    assert data["schema_version"] == core.SCHEMA_VERSION


def test_command_table_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "--no-torch")
    if "GPU          none found" not in out:  # pragma: no cover
        pytest.skip("this machine has a GPU")
    assert code == 0 and out.rstrip().endswith("healthy (exit 0)") and "CPU" in out.splitlines()[2]


def test_command_bad_device_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "--device", "rocm")
    assert code == 2 and out == ""
    assert err.strip() == ("perfsuite doctor: --device 'rocm' is not one of auto, cpu, cuda "
                           "(a ROCm GPU is 'cuda' in torch)")


def test_command_explain(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "--explain", str(DATA / "missing_code_object_errors.txt"))
    assert code == 1 and "hipErrorNoBinaryForGpu" in out and "gfx90a" in out and "libamd_smi.so" in out
    code, out, err = _cli(capsys, "--explain", "/nonexistent/log")
    assert code == 2 and "cannot read it" in err


def test_machine_facts_cpu_imports_no_torch() -> None:
    code = ("import sys, json; from perfsuite.machine.doctor import machine_facts; f = machine_facts('cpu'); "
            "print(json.dumps({'torch': 'torch' in sys.modules, 'facts': f}))")
    env = {**os.environ, "HSA_OVERRIDE_GFX_VERSION": "10.3.0", "HCC_AMDGPU_TARGET": "gfx90a"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                         cwd=Path(__file__).parents[2]).stdout
    data = json.loads(out)
    assert data["torch"] is False
    f = data["facts"]
    assert f["device"] == "cpu" and f["cpu"]["cores"] >= 1
    assert f["env_overrides"] == {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}  # build-only variables are not run facts
    assert "gfx1030" in f["unsupported_override"]


# ------------------------------------------------------------------------ captured AMD machine, fake host
def _amd_host(env: dict[str, str], kfd_openable: bool = True) -> Host:
    outputs = {"rocminfo": (DATA / "rocminfo_mi250x_rocm57.txt").read_text(),
               "rocm-smi": (DATA / "rocm_smi_productname_mi250x.json").read_text()}

    def run(cmd: list[str], timeout: float) -> tuple[int, str, str]:
        return 0, outputs[cmd[0]], ""

    nodes = {"/dev/kfd", "/dev/dri/renderD128"}
    return Host(env=env, run=run, which=lambda n: f"/opt/rocm/bin/{n}" if n in outputs else None,
                read_text=lambda p: None, glob=lambda pat: ["/dev/dri/renderD128"] if "renderD" in pat else [],
                exists=lambda p: p in nodes, access=lambda p, mode: kfd_openable or p != "/dev/kfd")


def _amd_report(env: dict[str, str], torch_archs: list[str] | None, kfd_openable: bool = True) -> core.Report:
    host = _amd_host(env, kfd_openable)
    sources = [rocminfo.probe(host), rocm_smi.probe(host)]
    gpus, src = core.pick_gpus(sources)
    builds = {"torch": {"version": "2.5.1+rocm6.2", "kind": "rocm", "hip": "6.2", "arch_list": torch_archs},
              "onnxruntime": {"dists": {"onnxruntime": "1.32.0"}, "providers": ["CPUExecutionProvider"]},
              "vllm": {}}
    from perfsuite.machine.doctor import access

    r = core.Report("cuda", {"model": "AMD EPYC 7A53"}, gpus, src, sources, {}, core.env_overrides(env), builds,
                    access.check(host))
    r.findings = core.assess(r)
    return r


def test_mi250x_with_a_matching_torch_is_healthy() -> None:
    r = _amd_report({}, ROCM62)
    assert r.gpu_source == "rocminfo" and r.gpus[0].arch == "gfx90a" and r.healthy
    assert any(f.level == "ok" and "has code objects for gfx90a" in f.message for f in r.findings)
    # rocm-smi filled nothing rocminfo lacked, but both saw the device; the rocminfo name wins
    assert r.gpus[0].name == "AMD Instinct MI250X"


def test_mi250x_with_the_seeds_override_is_blocking() -> None:
    r = _amd_report({"HSA_OVERRIDE_GFX_VERSION": "9.0.0", "HCC_AMDGPU_TARGET": "gfx90a"}, ROCM62)
    assert r.exit_code == 1
    [bad] = [f for f in r.findings if f.topic == "override" and f.blocking]
    assert "gfx900 code objects on a gfx90a device" in bad.message
    [hcc] = [f for f in r.findings if "HCC_AMDGPU_TARGET" in f.message]
    assert not hcc.blocking and "only when compiling" in hcc.message


def test_mi250x_with_a_torch_without_gfx90a_predicts_no_binary() -> None:
    r = _amd_report({}, ["gfx1030", "gfx1100"])
    [f] = [f for f in r.findings if f.topic == "arch"]
    assert f.blocking and "hipErrorNoBinaryForGpu" in f.message and "HSA_OVERRIDE" not in f.fix


def test_kfd_not_openable_names_the_group_fix() -> None:
    r = _amd_report({}, ROCM62, kfd_openable=False)
    [f] = [f for f in r.findings if f.topic == "access"]
    assert f.blocking and "/dev/kfd" in f.message and "usermod" in f.fix


def test_no_gpu_source_order_and_merge() -> None:
    a = SourceResult("a", "absent")
    smi = rocm_smi.probe(_amd_host({}))
    info = rocminfo.probe(_amd_host({}))
    gpus, src = core.pick_gpus([a, smi, info])
    assert src == "rocm-smi" and gpus[0].name == "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2"
    assert gpus[0].vram_bytes == 67092480 * 1024  # filled from rocminfo's pool
    assert smi.gpus[0].vram_bytes is None  # the source's own record is untouched
