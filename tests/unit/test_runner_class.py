from perfsuite import runner_class


def test_cpu_class_is_model_and_cores():
    rc = runner_class.from_facts("cpu", {"cpu_model": "AMD EPYC 7763 64-Core Processor", "cores": 16})
    assert rc == "cpu-amd-epyc-7763-64-core-16c"


def test_gpu_classes_name_kind_arch_and_device():
    rocm = {"kind": "rocm", "arch": "gfx90a", "device_name": "AMD Instinct MI250X/MI250", "device_count": 1}
    assert runner_class.from_facts("cuda", rocm) == "rocm-gfx90a-amd-instinct-mi250x-mi250"
    nv = {"kind": "cuda", "arch": "sm90", "device_name": "NVIDIA H200", "device_count": 2}
    assert runner_class.from_facts("cuda", nv) == "cuda-sm90-nvidia-h200x2"


def test_detect_here_is_stable_and_light():

    a, facts = runner_class.detect("cpu")
    assert a == runner_class.detect("cpu")[0] and a.startswith("cpu-") and facts["cores"] >= 1


def test_plugin_import_is_light():
    import subprocess
    import sys

    code = ("import sys, perfsuite.plugin, perfsuite.cli; "
            "print(' '.join(m for m in ('torch','onnxruntime','vllm','transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
