"""Hardware-dependent decisions, made for injected CPUs: tier, runner class, which known gaps apply, characterised.

The machines (tests/unit/data/cpu_machines.json, each with the source of its flags): an AVX2-only AMD EPYC (issue
17's), an AVX-512 Skylake without VNNI, the AMX Xeon that recorded the committed baselines, this VM's Zen 5 EPYC,
and two Neoverse cores. None of these decisions reads the CPU it runs on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfsuite.machine import capabilities, runner_class
from perfsuite.measure.ops import known_gaps as kg

ROOT = Path(__file__).resolve().parents[2]
MACHINES = {k: v for k, v in json.loads((Path(__file__).parent / "data" / "cpu_machines.json").read_text()).items()
            if not k.startswith("_")}
INT8_F32 = ("int8_dynamic_matmul", "onnxruntime-cpu", "float32")
# The cell that failed the README test command on issue 17's AVX2-only EPYC.
ISSUE_17_CELL = {"op": "int8_dynamic_matmul", "backend": "onnxruntime-cpu", "dtype": "float32",
                 "shape_class": "decode", "worst": "wrong", "n": 8,
                 "detail": "3/8 element(s) out of tolerance, max |err| 0.898 = 19.3 x tol"}


def caps(name: str) -> capabilities.CpuCapabilities:
    m = MACHINES[name]
    return capabilities.CpuCapabilities(m["arch"], m["model"], frozenset(m["flags"]), m["cores"])


def env_of(name: str) -> kg.Environment:
    return kg.environment(caps=caps(name))


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_tier_of_each_machine(name):
    assert caps(name).tier == MACHINES[name]["tier"]


@pytest.mark.parametrize(("arch", "flags", "tier"), [
    ("x86_64", "sse sse2 sse4_2 avx", "sse"),
    ("x86_64", "avx2 fma avx_vnni", "avx2vnni"),  # Alder Lake / E-core Xeon 6: AVX2 + AVX-VNNI, no AVX-512
    ("x86_64", "avx2 avx512f avx512_vnni amx_tile", "amx"),
    ("AMD64", "avx2", "avx2"),  # Windows' name for the architecture
    ("aarch64", "fp asimd", "neon"),
    ("aarch64", "fp asimd asimddp i8mm", "i8mm"),  # NEON with int8 matmul, no SVE (e.g. Apple M2)
    ("aarch64", "fp asimd asimddp sve sve2 i8mm", "sve2"),
    ("arm64", "fp asimd sme", "sme"),
    ("ppc64le", "", "ppc64le"),
])
def test_tier_ladders(arch, flags, tier):
    assert capabilities.tier(arch, flags.split()) == tier


@pytest.mark.parametrize(("name", "rc"), [
    ("epyc-avx2", "cpu-amd-epyc-avx2-2c"),
    ("skylake-avx512", "cpu-intel-xeon-platinum-8175m-2-50ghz-avx512-2c"),
    ("xeon-amx", "cpu-intel-xeon-amx-2c"),
    ("epyc-zen5-avx512vnni", "cpu-amd-epyc-avx512vnni-2c"),
    ("neoverse-n1", "cpu-arm-neoverse-n1-dotprod-4c"),
    ("neoverse-v1", "cpu-arm-neoverse-v1-sve-4c"),
])
def test_class_name_carries_the_tier(name, rc):
    got, facts = runner_class.detect("cpu", caps(name))
    assert got == rc and facts["cpu_tier"] == MACHINES[name]["tier"]
    assert facts["cpu_flags"] == sorted(MACHINES[name]["flags"]) and "cpu_flags_injected" not in facts


def test_two_epycs_of_one_old_class_are_two_classes_now():
    """Issue 17: an AVX2 EPYC and an AVX-512 EPYC both were cpu-amd-epyc-2c, their TPOT 2.5x apart."""
    a, fa = runner_class.detect("cpu", caps("epyc-avx2"))
    b, fb = runner_class.detect("cpu", caps("epyc-zen5-avx512vnni"))
    assert fa["legacy_runner_class"] == fb["legacy_runner_class"] == "cpu-amd-epyc-2c"
    assert a != b


@pytest.mark.parametrize(("name", "applies"), [
    ("epyc-avx2", True), ("skylake-avx512", True),  # vpmaddubsw kernels: saturate
    ("xeon-amx", False), ("epyc-zen5-avx512vnni", False),  # AMX / VNNI kernels
    ("neoverse-n1", False), ("neoverse-v1", False),  # not x86
])
def test_int8_saturation_gap_applies_where_no_vnni_kernel_runs(name, applies):
    found = kg.for_runner(runner_class.detect("cpu", caps(name))[0], kg.directory_for(ROOT), env_of(name))
    gap = kg.find(found.gaps, *INT8_F32, "decode", "wrong")
    assert (gap is not None) == applies, found.describe()
    report = kg.evaluate([ISSUE_17_CELL], found.gaps, found.characterised)
    if applies:  # the issue's failure is known where ORT's u8s8 kernel saturates
        assert report.known and not report.new and "reduce_range" in report.known[0]["reason"]
    else:  # where a VNNI/AMX kernel runs, the same error is a real, new gap (or uncharacterised on Arm)
        assert not report.known and len(report.new + report.uncharacterised) == 1


@pytest.mark.parametrize(("name", "characterised"), [
    ("epyc-avx2", True), ("xeon-amx", True), ("epyc-zen5-avx512vnni", True),
    ("skylake-avx512", False), ("neoverse-n1", False), ("neoverse-v1", False),
])
def test_characterised_per_feature_set_not_per_name(name, characterised):
    rc = runner_class.detect("cpu", caps(name))[0]
    for cls in (rc, "cpu-amd-epyc-2c", "cpu-some-forced-name-8c"):  # a forced name changes nothing
        found = kg.for_runner(cls, kg.directory_for(ROOT), env_of(name))
        assert found.characterised == characterised, found.describe()
    state = "characterised on" if characterised else "not yet characterised on"
    assert f"({state} {caps(name).arch}/{caps(name).tier}" in found.describe()
    unmatched = {**ISSUE_17_CELL, "op": "topk", "worst": "nan"}
    report = kg.evaluate([unmatched], found.gaps, found.characterised)
    assert len(report.new if characterised else report.uncharacterised) == 1


# ---- the test hook: PERFSUITE_CPU_FLAGS changes decisions, never kernels ------------------------------------------
def test_env_flags_replace_the_cpus_and_are_marked():
    c = capabilities.detect(env={"PERFSUITE_CPU_FLAGS": " ".join(MACHINES["epyc-avx2"]["flags"])}, machine="x86_64")
    assert c.tier == "avx2" and c.injected
    assert runner_class.detect("cpu", c)[1]["cpu_flags_injected"] == "PERFSUITE_CPU_FLAGS"
    assert "flags injected by PERFSUITE_CPU_FLAGS" in kg.environment(caps=c).features()
    assert capabilities.detect(env={"PERFSUITE_CPU_FLAGS": "avx2,avx512f"}, machine="x86_64").tier == "avx512"


@pytest.mark.parametrize(("value", "needle"), [
    ("", "PERFSUITE_CPU_FLAGS is set but empty; unset it"),
    ("AVX2", "PERFSUITE_CPU_FLAGS: 'AVX2' is not a /proc/cpuinfo flag name"),
    ("avx2 avx-512", "'avx-512' is not a /proc/cpuinfo flag name"),
])
def test_malformed_env_flags_are_one_clear_line(value, needle):
    with pytest.raises(ValueError) as exc:
        capabilities.detect(env={"PERFSUITE_CPU_FLAGS": value})
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_malformed_env_flags_are_a_usage_error_of_perfsuite_ops(tmp_path, monkeypatch, capsys):
    from perfsuite import cli

    monkeypatch.setenv("PERFSUITE_CPU_FLAGS", "AVX2")
    assert cli.main(["ops", "--ops", "silu", "--classes", "unit", "-q", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perfsuite ops: PERFSUITE_CPU_FLAGS: 'AVX2'") and err.count("\n") == 1


def test_cpuinfo_parsing_x86_and_aarch64():
    x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7763 64-Core Processor\nflags\t\t: fpu avx2\n"
    assert capabilities.parse_cpuinfo(x86) == ("AMD EPYC 7763 64-Core Processor", frozenset({"fpu", "avx2"}))
    arm = ("processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd asimddp\nCPU implementer\t: 0x41\n"
           "CPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n")
    assert capabilities.parse_cpuinfo(arm) == ("ARM Neoverse-N1", frozenset({"fp", "asimd", "asimddp"}))
    c = capabilities.detect(cpuinfo=arm, env={}, machine="aarch64", cores=4)
    assert runner_class.detect("cpu", c)[0] == "cpu-arm-neoverse-n1-dotprod-4c"


def test_recorded_flags_of_the_committed_baselines_give_their_class():
    """The migration's check: the tier derived from each committed run's recorded flags is its folder's."""
    folder = ROOT / "baselines" / "cpu-intel-xeon-amx-2c-before-20261206"
    runs = sorted(folder.glob("*.json"))
    assert len(runs) == 10
    for p in runs:
        mi = json.loads(p.read_text())["machine_info"]
        assert mi["perfsuite"]["runner_class"] == "cpu-intel-xeon-2c"  # recorded before the tier; files unchanged
        assert capabilities.from_machine_info(mi).tier == "amx"
        assert runner_class.recorded_class(mi) == "cpu-intel-xeon-amx-2c"
