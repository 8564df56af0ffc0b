import pytest

from perfsuite.facts import runner_name
from perfsuite.machine import runner_class


def test_cpu_class_is_model_tier_and_cores():
    facts = {"cpu_model": "AMD EPYC 7763 64-Core Processor", "cores": 16, "cpu_tier": "avx2"}
    assert runner_class.from_facts("cpu", facts) == "cpu-amd-epyc-7763-64-core-avx2-16c"
    # the name it had before the tier, which `perfsuite baselines migrate` and old runs are matched on
    assert runner_class.legacy_cpu_class(facts["cpu_model"], 16) == "cpu-amd-epyc-7763-64-core-16c"


def test_gpu_classes_name_kind_arch_and_device():
    rocm = {"kind": "rocm", "arch": "gfx90a", "device_name": "AMD Instinct MI250X/MI250", "device_count": 1}
    assert runner_class.from_facts("cuda", rocm) == "rocm-gfx90a-amd-instinct-mi250x-mi250"
    nv = {"kind": "cuda", "arch": "sm90", "device_name": "NVIDIA H200", "device_count": 2}
    assert runner_class.from_facts("cuda", nv) == "cuda-sm90-nvidia-h200x2"


def test_detect_here_is_stable_and_light():

    a, facts = runner_class.detect("cpu")
    assert a == runner_class.detect("cpu")[0] and a.startswith("cpu-") and facts["cores"] >= 1
    assert f"-{facts['cpu_tier']}-{facts['cores']}c" in a and facts["cpu_arch"] and facts["cpu_flags"] is not None


def test_plugin_import_is_light():
    import subprocess
    import sys

    code = ("import sys, perfsuite.plugin, perfsuite.cli; "
            "print(' '.join(m for m in ('torch','onnxruntime','vllm','transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


# ---- one validated type: a runner class names a folder, never a path ------------------------------------------
@pytest.mark.parametrize("name", ["cpu-intel-xeon-amx-2c", "cpu-amd-epyc-avx2-2c", "cpu-amd-epyc-2c",
                                  "rocm-gfx90a-amd-instinct-mi250x-mi250",
                                  "cuda-sm90-nvidia-h200x2", "rc", "a" * runner_name.MAX_LENGTH])
def test_valid_classes_pass_unchanged(name):
    assert runner_name.validate(name) == name
    assert runner_class.RunnerClass(name) == name and runner_class.RunnerClass(name).family == name.split("-")[0]


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("../../etc", "a path, not a name"),
        ("/etc", "a path, not a name"),
        ("cpu/../../x", "a path, not a name"),
        ("..", "a path, not a name"),
        ("~root", "a path, not a name"),
        ("known_gaps", "a reserved name (the folder of operator gap lists"),
        ("known-gaps", "a reserved name"),
        ("all", "a reserved name (baselines/known_gaps/all.toml"),
        ("NUL", "a device name on Windows"),
        ("CPU-AMD-EPYC-AVX2-2C", "did you mean 'cpu-amd-epyc-avx2-2c'?"),
        ("cpu amd epyc", "did you mean 'cpu-amd-epyc'?"),
        ("-cpu", "starting and ending with a letter or digit"),
        ("", "1-80 lowercase letters, digits and '-'"),
        ("x" * 81, "is 81 characters long"),
    ],
)
def test_invalid_classes_name_value_rule_and_fix(name, needle):
    with pytest.raises(ValueError) as exc:
        runner_name.validate(name, "PERFSUITE_RUNNER_CLASS")
    msg = str(exc.value)
    assert msg.startswith("PERFSUITE_RUNNER_CLASS ") and needle in msg
    assert repr(name[:40]) in msg  # names the value
    assert "\n" not in msg


@pytest.mark.parametrize("facts", [
    {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+ with an absurdly long marketing name " * 3, "cores": 224,
     "cpu_tier": "amx"},
    {"cpu_model": "", "cores": 1, "cpu_tier": "sse"},
])
def test_detected_classes_always_validate(facts):
    rc = runner_class.from_facts("cpu", facts)
    assert runner_name.validate(rc) == rc and len(rc) <= runner_name.MAX_LENGTH
    assert rc == runner_class.from_facts("cpu", facts)  # a long name is cut with a hash: still stable
    assert rc.endswith(f"-{facts['cpu_tier']}-{facts['cores']}c")  # the cut keeps the tier and the cores
    other = runner_class.from_facts("cpu", {**facts, "cpu_model": facts["cpu_model"] + "x"})
    assert facts["cpu_model"] == "" or other != rc  # the hash tells two long names apart
