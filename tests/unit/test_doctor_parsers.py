"""The doctor's parsers against captured real outputs (tests/unit/data/doctor/SOURCES.md names each source)."""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
from pathlib import Path

import pytest

from perfsuite.machine.doctor import amd_smi_cli, amdsmi_lib, explain, gfx, kfd, nvidia_smi, rocm_smi, rocminfo
from perfsuite.machine.doctor.facts import json_document
from perfsuite.machine.doctor.host import Host

DATA = Path(__file__).parent / "data" / "doctor"


def _text(name: str) -> str:
    return (DATA / name).read_text()


def _sections(name: str) -> dict[str, str]:
    """A fixture of several captures, each after a ``# <source>`` line."""
    out: dict[str, str] = {}
    key = ""
    for line in _text(name).splitlines(keepends=True):
        if line.startswith("# "):
            key = line[2:].strip()
            out[key] = ""
        else:
            out[key] += line
    return out


# -------------------------------------------------------------------------------------------------- rocminfo
def test_rocminfo_mi250x_gpu_agent() -> None:
    [g] = rocminfo.parse(_text("rocminfo_mi250x_rocm57.txt"))  # the CPU agent is not a GPU
    assert (g.vendor, g.name, g.arch) == ("amd", "AMD Instinct MI250X", "gfx90a")
    assert g.vram_bytes == 67092480 * 1024  # the coarse-grained GLOBAL pool: one GCD's 64 GiB
    assert g.extra["compute_units"] == 110 and g.extra["kfd_node"] == 4
    assert g.extra["target_id"] == "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-"
    assert rocminfo.kernel_driver(_text("rocminfo_mi250x_rocm57.txt")) is None  # "ROCk module is loaded" (5.x)


def test_rocminfo_truncated_output_is_rejected() -> None:
    text = _text("rocminfo_mi250x_rocm57.txt")
    cut = text[:text.index("Pool Info:", text.index("Device Type:             GPU"))]  # cut before its VRAM
    with pytest.raises(ValueError, match="ends before"):
        rocminfo.parse(cut)
    r = rocminfo.probe(Host(run=lambda cmd, timeout: (0, cut, ""), which=lambda n: f"/opt/rocm/bin/{n}"))
    assert (r.status, r.gpus) == ("error", []) and "malformed output" in r.detail


def test_rocminfo_agents_keep_cpu_agents_apart() -> None:
    agents = rocminfo.parse_agents(_text("rocminfo_mi250x_rocm57.txt"))
    assert [(a["_agent"], a["Device Type"]) for a in agents] == [("1", "CPU"), ("5", "GPU")]
    assert agents[0]["Marketing Name"] == "AMD EPYC 7A53 64-Core Processor"


# --------------------------------------------------------------------------------------------- KFD topology
def test_kfd_mi100_properties() -> None:
    props = kfd.parse_properties(_text("kfd_properties_mi100.txt"))
    g = kfd.gpu_from_properties(props, 0)
    assert g is not None and g.arch == "gfx908"  # gfx_target_version 90008
    assert g.extra["device_id"] == 0x738C and g.extra["compute_units"] == 120  # MI100: 120 CUs
    assert g.extra["drm_render_minor"] == 128


def test_kfd_2018_kernel_without_gfx_target_version() -> None:
    g = kfd.gpu_from_properties(kfd.parse_properties(_text("kfd_properties_rx470_2018.txt")), 0)
    assert g is not None and g.arch is None  # the line did not exist yet: arch unknown, not guessed
    assert g.extra["device_id"] == 26591 and g.extra["compute_units"] == 32  # RX 470: 32 CUs


def test_kfd_read_walks_the_topology_tree(tmp_path: Path) -> None:
    node = tmp_path / "nodes" / "1"
    node.mkdir(parents=True)
    (node / "properties").write_text(_text("kfd_properties_mi100.txt"))
    (node / "name").write_text("arcturus\n")  # the node's name file, as in the same capture (rocmi's test)
    host = Host(glob=lambda pat: sorted(str(p) for p in tmp_path.glob(pat.replace(str(tmp_path) + "/", ""))))
    [g] = kfd.read(host, str(tmp_path / "nodes"))
    assert (g.arch, g.extra["kfd_node"], g.extra["kfd_name"]) == ("gfx908", 1, "arcturus")


def test_target_version_decoding_matches_the_captures() -> None:
    assert gfx.from_target_version(90008) == "gfx908"  # kfd_properties_mi100.txt
    assert gfx.from_target_version(90010) == "gfx90a"  # stepping 10 is the hex digit a
    assert gfx.from_target_version(0) is None


# ------------------------------------------------------------------------------------------------- rocm-smi
def test_rocm_smi_mi250x_prints_gfx90a_as_gfx9010() -> None:
    [g], facts = rocm_smi.parse(_text("rocm_smi_productname_mi250x.json"))
    assert g.name == "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2"
    assert g.arch == "gfx90a" and g.extra["gfx_version_as_printed"] == "gfx9010"
    assert facts == {}


def test_rocm_smi_rx7900xt_memory_and_arch() -> None:
    [g], _ = rocm_smi.parse(_text("rocm_smi_rx7900xt.json"))
    assert (g.name, g.arch, g.vram_bytes) == ("Radeon RX 7900 XT", "gfx1100", 21458059264)
    assert g.extra["vram_used_bytes"] == 27856896


def test_rocm_smi_meminfo_only() -> None:
    gpus, _ = rocm_smi.parse(_text("rocm_smi_meminfo_vram.json"))
    assert [(g.index, g.vram_bytes, g.arch) for g in gpus] == [(0, 8573157376, None), (1, 536870912, None)]


# -------------------------------------------------------------------------------------------------- amd-smi
def test_amd_smi_rocm7_gpu_data_shape_after_warning_lines() -> None:
    text = _text("amd_smi_static_rocm7_rx7800xt.txt")
    # The capture ends inside "bus" (where the index cut it); close what is open after the complete asic block.
    cut = text[: text.index('"bus"')].rstrip().rstrip(",") + "\n}]}\n"
    assert cut.splitlines()[0].endswith("SyntaxWarning: 'return' in a 'finally' block")  # noise before the JSON
    [g] = amd_smi_cli.parse_static(cut)
    assert (g.name, g.arch, g.index, g.source) == ("AMD Radeon RX 7800 XT", "gfx1101", 0, "amd-smi")
    assert g.extra["compute_units"] == 60 and g.extra["device_id"] == "0x747e"


def test_amd_smi_rocm6_list_shape_vram_block() -> None:
    # AMD's blog indexes `amd-smi static --json` with .[0]: the pre-ROCm-7 list. Its vram block, in that list:
    vram = json.loads(_text("amd_smi_static_rocm6_vram_fragment.json"))
    [g] = amd_smi_cli.parse_static(json.dumps([{"gpu": 0, "vram": vram}]))
    assert g.vram_bytes == 196592 * 2**20 and g.extra["vram_type"] == "HBM"


def test_amd_smi_both_shapes_give_the_same_entries() -> None:
    entry = {"gpu": 3, "asic": {"market_name": "x"}}
    assert amd_smi_cli.gpu_entries([entry]) == amd_smi_cli.gpu_entries({"gpu_data": [entry]}) == [entry]
    with pytest.raises(ValueError):
        amd_smi_cli.gpu_entries({"card0": {}})


def test_amd_smi_metric_csv_vram() -> None:
    per_gpu = amd_smi_cli.parse_metric_csv(_text("amd_smi_metric_8xmi300x_head.csv"))
    assert per_gpu == {0: (283 * 2**20, 196592 * 2**20), 1: (283 * 2**20, 196592 * 2**20)}


def test_json_document_skips_a_permission_banner() -> None:
    banner = "Permission needed to access required GPU device node(s):\n  • /dev/kfd: Permission denied\n"
    assert json_document(banner + '[\n {"gpu": 0}\n]\n') == [{"gpu": 0}]
    with pytest.raises(ValueError):
        json_document("WARNING: No JSON data to report\n")


# ----------------------------------------------------------------------------------------------- nvidia-smi
def test_nvidia_smi_query_by_header_names() -> None:
    [g] = nvidia_smi.parse_query(_text("nvidia_smi_query_h100.csv"))
    assert (g.vendor, g.name, g.driver, g.index) == ("nvidia", "NVIDIA H100 80GB HBM3", "535.161.07", 0)
    assert g.vram_bytes == 81559 * 2**20 and g.extra["vram_used_bytes"] == 3 * 2**20
    assert g.arch is None  # this query had no compute_cap column


def test_nvidia_smi_truncated_row_is_rejected_not_a_device() -> None:
    text = _text("nvidia_smi_query_h100.csv")
    cut = text.index(", 81559,") + len(", 8")  # the capture cut inside memory.total: "8" MiB and nothing after
    with pytest.raises(ValueError, match=r"row 1 has 18 of 39 fields"):
        nvidia_smi.parse_query(text[:cut])

    def run(cmd: list[str], timeout: float) -> tuple[int, str, str]:
        return 0, text[:cut], ""

    r = nvidia_smi.probe(Host(run=run, which=lambda n: f"/usr/bin/{n}"))
    assert (r.status, r.gpus) == ("error", []) and r.detail.startswith("nvidia-smi: malformed output"), r


# ----------------------------------------------------------------------------------- torch arch lists (ROCm)
def _arch_lists() -> dict[str, list[str]]:
    """{torch version: arch list} from the REPL captures; the rocm7.2 capture printed no version string."""
    out: dict[str, list[str]] = {}
    version = ""
    for m in re.finditer(r"^# .*(rocm7\.2).*$|^'([^']+)'$|^(\[[^\]]*\])", _text("torch_rocm_arch_lists.txt"),
                         re.M):
        if m.group(1):
            version = "rocm7.2 wheel"
        elif m.group(2):
            version = m.group(2)
        else:
            out[version] = ast.literal_eval(m.group(3))
    return out


def test_known_wheel_table_matches_the_captured_lists() -> None:
    lists = _arch_lists()
    assert set(lists) == {"2.5.1+rocm6.2", "2.7.1+rocm6.3", "2.4.1+rocm6.0", "rocm7.2 wheel"}
    for version, _index, archs in gfx.KNOWN_TORCH_ROCM_WHEELS:
        assert sorted(archs) == sorted(lists[version]), version


@pytest.mark.parametrize("device, wheel, status, override_hint", [
    ("gfx90a", "2.5.1+rocm6.2", "ok", None),  # MI250X on a stock wheel
    ("gfx942", "2.4.1+rocm6.0", "ok", None),  # MI300X
    ("gfx1101", "2.5.1+rocm6.2", "no-binary", "11.0.0"),  # RX 7800 XT before gfx1101 was built
    ("gfx1101", "2.7.1+rocm6.3", "ok", None),
    ("gfx1031", "2.7.1+rocm6.3", "no-binary", "10.3.0"),  # RX 6700 XT: the classic 10.3.0 mapping
    ("gfx1151", "2.7.1+rocm6.3", "no-binary", "11.0.0"),  # Strix Halo: pytorch/pytorch#164346's advice
    ("gfx1151", "rocm7.2 wheel", "ok", None),
    ("gfx908", "2.5.1+rocm6.2", "ok", None),
])
def test_arch_check_against_real_wheels(device: str, wheel: str, status: str, override_hint: str | None) -> None:
    v = gfx.check_amd(device, _arch_lists()[wheel], None)
    assert v.status == status and v.blocking == (status == "no-binary")
    if override_hint:
        assert f"HSA_OVERRIDE_GFX_VERSION={override_hint}" in v.fix and "unsupported" in v.fix
    if status == "no-binary":
        assert "hipErrorNoBinaryForGpu" in v.message
        if gfx.wheel_with(device):  # a known wheel has the arch: name it; none (gfx1031): build from source
            assert "--index-url https://download.pytorch.org/whl/rocm" in v.fix
        else:
            assert f"PYTORCH_ROCM_ARCH={device}" in v.fix


def test_seed_override_9_0_0_on_mi250x_is_an_error() -> None:
    v = gfx.check_amd("gfx90a", _arch_lists()["2.5.1+rocm6.2"], "9.0.0")
    assert v.status == "bad-override" and v.blocking and v.effective_arch == "gfx900"
    assert "gfx900 code objects on a gfx90a device" in v.message
    assert v.fix.startswith("unset HSA_OVERRIDE_GFX_VERSION") and "supported without one" in v.fix


def test_override_inside_the_family_runs_and_is_marked() -> None:
    v = gfx.check_amd("gfx1031", _arch_lists()["2.5.1+rocm6.2"], "10.3.0")
    assert v.status == "ok-override" and not v.blocking and v.effective_arch == "gfx1030"
    assert any("unsupported" in n for n in v.notes)


# --------------------------------------------------------------------------------- torch arch lists (CUDA)
@pytest.mark.parametrize("source", list(_sections("torch_cuda_incompatible_warnings.txt")))
def test_nvidia_check_agrees_with_torchs_own_warning(source: str) -> None:
    text = _sections("torch_cuda_incompatible_warnings.txt")[source]
    m = re.search(r"capability (sm_\d+) is not compatible.*supports CUDA capabilities (.+)\.\n", text, re.S)
    assert m
    _, major, minor = gfx.parse_sm(m.group(1)) or ("", 0, 0)
    v = gfx.check_nvidia(major, minor, m.group(2).split())
    assert v.status == "no-binary" and v.blocking


def test_nvidia_h100_on_a_list_with_sm_90() -> None:
    rtx5090_list = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90".split()  # from the LeggedLab#26 capture
    assert gfx.check_nvidia(9, 0, rtx5090_list).status == "ok"
    assert gfx.check_nvidia(8, 9, rtx5090_list).status == "ok"  # sm_86 cubins run on sm_89


# ------------------------------------------------------------------------------------------- error texts
@pytest.mark.parametrize("source, topic, needle", [
    ("ROCm/ROCm-docker#89 (CyberShadow, 2022-04-14): rocm/pytorch:rocm5.1.1 on an RX 6900 XT", "arch",
     "hipErrorNoBinaryForGpu"),
    ("pytorch/pytorch#53738 (2021): older HIP spelling", "arch", "hipErrorNoBinaryForGpu"),
    ("ROCm/tensorflow-upstream#1106 (oleid, 2020-09-09)", "arch", "hipErrorNoBinaryForGpu"),
    ("ROCm/legacy-rocm-build#4208 (segeljakt, 2025-01-02): torch on MI250X, ROCm 6.2.1, AMD_LOG_LEVEL=5", "arch",
     "no code object for gfx90a"),
    ("ROCm/legacy-rocm-build#4208 (title): torch", "arch", "invalid device function"),
    ("microsoft/onnxruntime#16566 (borg323, 2023-07-02): onnxruntime-rocm on a 7900 XTX", "arch",
     "invalid device function"),
    ("pytorch/pytorch#188724 (amdfaa, 2026-07-01): import amdsmi without the ROCm library", "runtime",
     "libamd_smi.so"),
])
def test_explain_recognizes_each_captured_error(source: str, topic: str, needle: str) -> None:
    findings = explain.classify(_sections("missing_code_object_errors.txt")[source])
    assert findings and findings[0].topic == topic and needle in findings[0].message and findings[0].blocking


def test_explain_cuda_warning_uses_the_decision_table() -> None:
    [f] = explain.classify(_text("torch_cuda_incompatible_warnings.txt").split("# pytorch/pytorch#51850")[0])
    assert "sm_80" in f.message and "sm_37 sm_50 sm_60 sm_70" in f.message


def test_explain_says_nothing_about_a_clean_log() -> None:
    assert explain.classify(_text("rocminfo_mi250x_rocm57.txt")) == []


# ------------------------------------------------------------------------------ import amdsmi -> KeyError
class _BrokenAmdsmi:
    """A finder that fails ``import amdsmi`` the way the real package does without libamd_smi.so."""

    def find_spec(self, name, path=None, target=None):
        if name == "amdsmi":
            message = _sections("missing_code_object_errors.txt")[
                "pytorch/pytorch#188724 (amdfaa, 2026-07-01): import amdsmi without the ROCm library"]
            raise KeyError(re.search(r"KeyError: '([^']+)'", message).group(1))  # type: ignore[union-attr]
        return None


def test_amdsmi_keyerror_is_caught_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_BrokenAmdsmi(), *sys.meta_path])
    importlib.invalidate_caches()
    mod, why = amdsmi_lib.load()
    assert mod is None and "KeyError" in why and "libamd_smi.so" in why
    result = amdsmi_lib.probe()
    assert result.status == "error" and "amd-smi-lib" in result.detail
