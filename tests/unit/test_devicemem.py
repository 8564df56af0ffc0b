"""The device-memory sampler: absent on the CPU, its polling machinery on a real quantity, its CLI reader on a
captured ``amd-smi metric --csv``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from perfsuite.machine import devicemem
from perfsuite.machine.doctor.host import Host

DATA = Path(__file__).parent / "data" / "doctor"


class RssReader:
    """A real, changing quantity this machine has: this process's resident set (VmRSS)."""

    source = "VmRSS"
    min_interval_s = 0.001

    def used_bytes(self) -> int:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def close(self) -> None:
        pass


def test_cpu_records_nothing() -> None:
    with devicemem.DeviceMemorySampler("cpu") as s:
        bytearray(10 * 2**20)
    assert s.result.extra_info() == {} and s.result.source is None and "cpu" in (s.result.error or "")


def test_no_gpu_here_is_absent_with_the_reason() -> None:
    reader, why = devicemem.open_reader("cuda")
    if reader is not None:  # pragma: no cover - a GPU runner
        pytest.skip(f"this machine has a device-memory reader ({reader.source})")
    assert "nvml" in why or "amdsmi" in why
    with devicemem.DeviceMemorySampler("cuda") as s:
        pass
    assert s.result.extra_info() == {}  # absent, not a made-up zero


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_sampler_catches_a_transient_peak() -> None:
    block = 256 * 2**20
    with devicemem.DeviceMemorySampler("cuda", reader=RssReader(), interval_s=0.002) as s:
        buf = bytearray(block)  # touched: resident
        buf[::4096] = b"\x01" * (block // 4096)
        time.sleep(0.05)
        del buf
        time.sleep(0.05)
    r = s.result
    info = r.extra_info()
    assert info["device_memory_source"] == "VmRSS" and r.samples >= 5
    assert info["peak_device_delta_bytes"] >= 0.8 * block  # seen while it lived, freed before the block ended
    assert info["peak_device_used_bytes"] == info["device_used_baseline_bytes"] + info["peak_device_delta_bytes"]
    assert set(devicemem.KEYS) <= set(info)


def test_a_failing_reader_keeps_the_peak_and_says_why() -> None:
    class Flaky(RssReader):
        calls = 0

        def used_bytes(self) -> int:
            self.calls += 1
            if self.calls > 3:
                raise OSError("device lost")
            return 1000 * self.calls

    with devicemem.DeviceMemorySampler("cuda", reader=Flaky(), interval_s=0.001) as s:
        time.sleep(0.05)
    assert s.result.peak_bytes == 3000 and s.result.baseline_bytes == 1000
    assert "device lost" in (s.result.error or "")


def test_amd_smi_cli_reader_on_captured_csv() -> None:
    csv = (DATA / "amd_smi_metric_8xmi300x_head.csv").read_text()
    calls = []

    def run(cmd: list[str], timeout: float) -> tuple[int, str, str]:
        calls.append(cmd)
        return 0, csv, ""

    host = Host(run=run, which=lambda n: "/opt/rocm/bin/amd-smi")
    assert devicemem.AmdSmiCliReader(host, [0]).used_bytes() == 283 * 2**20
    assert devicemem.AmdSmiCliReader(host, [0, 1]).used_bytes() == 2 * 283 * 2**20
    assert calls[0] == ["amd-smi", "metric", "--mem-usage", "--csv"]
    with pytest.raises(RuntimeError, match="no used_vram for GPU"):
        devicemem.AmdSmiCliReader(host, [5]).used_bytes()


def test_visible_devices_map_to_physical_indices() -> None:
    assert devicemem.physical_indices([0, 1], {"CUDA_VISIBLE_DEVICES": "2,3"}, "nvidia") == [2, 3]
    assert devicemem.physical_indices([0], {"CUDA_VISIBLE_DEVICES": "GPU-8f3a"}, "nvidia") == [0]  # UUIDs: kept
    # ROCR picks physical 4,5,6; HIP then picks the second of those
    assert devicemem.physical_indices([0], {"ROCR_VISIBLE_DEVICES": "4,5,6", "HIP_VISIBLE_DEVICES": "1"},
                                      "amd") == [5]
    assert devicemem.default_indices(4) == [0, 1, 2, 3]


def test_library_readers_sum_their_devices_and_shut_down() -> None:
    from types import SimpleNamespace

    calls: list[str] = []
    amd = SimpleNamespace(
        amdsmi_init=lambda: calls.append("init"),
        amdsmi_get_processor_handles=lambda: ["h0", "h1", "h2"],
        AmdSmiMemoryType=SimpleNamespace(VRAM="vram"),
        amdsmi_get_gpu_memory_usage=lambda h, kind: {"h0": 1, "h1": 10, "h2": 100}[h],
        amdsmi_shut_down=lambda: calls.append("shut"),
    )
    r = devicemem.AmdSmiReader(amd, [0, 2])
    assert r.used_bytes() == 101
    r.close()
    assert calls == ["init", "shut"]
    old = SimpleNamespace(amdsmi_init=lambda: None, amdsmi_get_processor_handles=lambda: ["h0"],
                          amdsmi_get_gpu_vram_usage=lambda h: {"vram_used": 3})  # no memory_usage, no shut_down
    r = devicemem.AmdSmiReader(old, [0])
    assert r.used_bytes() == 3 * 2**20
    r.close()  # a library without the call is closed quietly

    nv = SimpleNamespace(nvmlInit=lambda: calls.append("nvinit"), nvmlDeviceGetHandleByIndex=lambda i: i,
                         nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=7 * (h + 1)),
                         nvmlShutdown=lambda: calls.append("nvshut"))
    r2 = devicemem.NvmlReader(nv, [0, 1])
    assert r2.used_bytes() == 7 + 14
    r2.close()
    assert calls[-2:] == ["nvinit", "nvshut"]
