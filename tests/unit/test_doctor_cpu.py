"""The doctor's CPU facts come from perfsuite.machine.capabilities: the same model, flags and tier as the runner class."""

from __future__ import annotations

from perfsuite.machine import capabilities, runner_class
from perfsuite.machine.doctor import cpu, report
from perfsuite.machine.doctor.host import Host

EPYC_AVX2 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7763 64-Core Processor\n"
             "flags\t\t: fpu sse2 avx avx2 fma bmi2\n\nprocessor\t: 1\nflags\t\t: fpu\n")


def _host(cpuinfo: str | None, **env: str) -> Host:
    return Host(env=env, read_text=lambda p: cpuinfo if p == "/proc/cpuinfo" else None, glob=lambda pat: [])


def test_an_injected_cpuinfo_decides_the_model_flags_tier_and_runner_class():
    f = cpu.facts(_host(EPYC_AVX2))
    cores = capabilities.cpu_count()
    assert f["model"] == "AMD EPYC 7763 64-Core Processor"  # read through the doctor's host, not this machine's
    assert f["flags"] == ["avx2", "fma"] and f["tier"] == "avx2"
    assert f["runner_class"] == f"cpu-amd-epyc-7763-64-core-avx2-{cores}c"
    caps = capabilities.detect(cpuinfo=EPYC_AVX2, env={})
    assert f["runner_class"] == runner_class.from_facts("cpu", {**caps.facts(), "cpu_model": caps.model,
                                                               "cores": caps.cores})


def test_this_machine_the_doctor_and_the_runner_class_agree():
    f = cpu.facts(Host(env={}))
    assert f["runner_class"] == runner_class.detect("cpu", capabilities.detect(env={}))[0]
    assert f["tier"] == capabilities.detect(env={}).tier


def test_the_doctor_shows_the_cpu_as_it_is_not_the_injected_flags():
    f = cpu.facts(_host(EPYC_AVX2, **{capabilities.ENV_FLAGS: "avx512f amx_tile"}))
    assert f["tier"] == "avx2" and "avx512f" not in f["flags"]


def test_the_doctor_names_injected_flags_and_refuses_malformed_ones():
    """Issue 40: the doctor ignored PERFSUITE_CPU_FLAGS and accepted malformed values silently. It now says what
    runs are classed as under the injected flags (a warning), and a malformed value is a blocking finding."""
    from perfsuite.machine.doctor.core import Report, assess

    cores = capabilities.cpu_count()
    f = cpu.facts(_host(EPYC_AVX2, **{capabilities.ENV_FLAGS: "avx512f amx_tile"}))
    assert f["injected_flags"] == {"tier": "amx", "runner_class": f"cpu-amd-epyc-7763-64-core-amx-{cores}c"}
    [w] = [x for x in assess(Report("cpu", f)) if x.topic == "cpu"]
    assert w.level == "warn" and "classed cpu-amd-epyc-7763-64-core-amx-" in w.message and "(tier avx2)" in w.message
    bad = cpu.facts(_host(EPYC_AVX2, **{capabilities.ENV_FLAGS: "avx512f; rm -rf"}))
    [e] = [x for x in assess(Report("cpu", bad)) if x.topic == "cpu"]
    assert e.blocking and capabilities.ENV_FLAGS in e.message and "unset" in e.fix
    assert "injected_flags" not in cpu.facts(_host(EPYC_AVX2))


def test_the_table_and_the_json_show_the_tier_and_the_class():
    from perfsuite.machine import doctor

    host = _host(EPYC_AVX2)
    host.which = lambda name: None  # no vendor tools
    r = doctor.collect("cpu", host=host, use_torch=False)
    lines = report.render(r)
    cpu_row = next(line for line in lines if line.startswith("CPU "))
    assert cpu_row.endswith("avx2 fma · tier avx2") and "AMD EPYC 7763 64-Core Processor" in cpu_row
    assert any(line.split()[:2] == ["class", r.cpu["runner_class"]] for line in lines), lines
    assert r.as_dict()["cpu"]["tier"] == "avx2"
