"""Datasheet figures of the devices the roofline compares with (perfsuite.machine.roofline.annotate).

Dense peaks, no sparsity; bandwidth per device as the runtime sees it (an MI250X is two devices, GCDs).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    bandwidth_bytes_per_s: float
    peak_flops_per_s: dict[str, float]  # dense, by dtype of the matmul
    source: str
    note: str = ""


def _dense(f16: float, f32: float, bf16: float | None = None) -> dict[str, float]:
    """Dense matmul peaks by dtype; bfloat16 at the float16 rate unless given."""
    return {"float16": f16, "bfloat16": f16 if bf16 is None else bf16, "float32": f32}


# Datasheet figures (dense, no sparsity). Matching is by substring of the device name torch/rocminfo reports, in
# this order (the first match wins: "MI250X/MI250" before "MI250X" before "MI250").
DATASHEET: tuple[tuple[str, DeviceSpec], ...] = (
    ("MI325X", DeviceSpec("AMD Instinct MI325X", 6.0e12, _dense(1307.4e12, 163.4e12),
                          "https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html")),
    ("MI300X", DeviceSpec("AMD Instinct MI300X", 5.3e12, _dense(1307.4e12, 163.4e12),
                          "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html")),
    ("MI250X/MI250", DeviceSpec("AMD Instinct MI250X or MI250, one GCD", 1.6384e12, {},
                                "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html",
                                "rocminfo names both parts alike: bandwidth is the same, the FLOP peak is not")),
    ("MI250X", DeviceSpec("AMD Instinct MI250X, one GCD", 1.6384e12, _dense(191.5e12, 47.85e12),
                          "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html",
                          "package: 3.2768 TB/s and 383 TFLOPS FP16 over two GCDs")),
    ("MI250", DeviceSpec("AMD Instinct MI250, one GCD", 1.6384e12, _dense(181.05e12, 45.25e12),
                         "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250.html",
                         "package: 3.2768 TB/s and 362.1 TFLOPS FP16 over two GCDs")),
    ("MI210", DeviceSpec("AMD Instinct MI210", 1.6384e12, _dense(181.0e12, 45.3e12),
                         "https://www.amd.com/en/products/accelerators/instinct/mi200/mi210.html")),
    ("MI100", DeviceSpec("AMD Instinct MI100", 1.2288e12, _dense(184.6e12, 46.1e12, bf16=92.3e12),
                         "https://www.amd.com/en/products/accelerators/instinct/mi100.html")),
    ("H200", DeviceSpec("NVIDIA H200 SXM", 4.8e12, _dense(989.4e12, 66.9e12),
                        "https://www.nvidia.com/en-us/data-center/h200/", "datasheet 1,979 TFLOPS is with sparsity")),
    ("H100 PCIe", DeviceSpec("NVIDIA H100 PCIe", 2.0e12, _dense(756.0e12, 51.2e12),
                             "https://www.nvidia.com/en-us/data-center/h100/")),
    ("H100", DeviceSpec("NVIDIA H100 SXM", 3.35e12, _dense(989.4e12, 66.9e12),
                        "https://www.nvidia.com/en-us/data-center/h100/", "datasheet 1,979 TFLOPS is with sparsity")),
    ("A100-SXM4-80GB", DeviceSpec("NVIDIA A100 SXM4 80GB", 2.039e12, _dense(312e12, 19.5e12),
                                  "https://www.nvidia.com/en-us/data-center/a100/")),
    ("A100 80GB PCIe", DeviceSpec("NVIDIA A100 80GB PCIe", 1.935e12, _dense(312e12, 19.5e12),
                                  "https://www.nvidia.com/en-us/data-center/a100/")),
    ("A100", DeviceSpec("NVIDIA A100 40GB", 1.555e12, _dense(312e12, 19.5e12),
                        "https://www.nvidia.com/en-us/data-center/a100/")),
)


def datasheet(device_name: str | None) -> DeviceSpec | None:
    if not device_name:
        return None
    return next((spec for key, spec in DATASHEET if key.upper() in device_name.upper()), None)
