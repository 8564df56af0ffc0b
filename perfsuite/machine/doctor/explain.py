"""Recognize the error texts of a missing code object (HIP, torch, ONNX Runtime, CUDA) and of a broken amdsmi."""

from __future__ import annotations

import re

from perfsuite.machine.doctor import gfx
from perfsuite.machine.doctor.facts import Finding

_RUN_DOCTOR = ("run `perfsuite doctor` on the machine that failed: it compares the device's arch with the build's "
               "arch list and names the wheel, container or override that fits")
_CUDA_WARN = re.compile(r"with CUDA capability (sm_\d+) is not compatible with the current PyTorch installation\.\s*"
                        r"The current PyTorch install supports CUDA capabilities ([^\n]+?)\.\s*$", re.M)


def classify(text: str) -> list[Finding]:
    """Findings for every known failure in ``text`` (a log, a traceback, a pasted error)."""
    out: list[Finding] = []
    missing = re.search(r"Missing CO for these ISAs", text)
    if missing:
        isas = sorted({gfx.normalize(m) or m for m in re.findall(r"amdgcn-amd-amdhsa--(\S+)", text[missing.end():])})
        out.append(Finding("error", "arch", "hipErrorNoBinaryForGpu: a loaded library has no code object for "
                           f"{', '.join(isas)} (HIP log: 'Missing CO for these ISAs')", _RUN_DOCTOR))
    elif "hipErrorNoBinaryForGpu" in text:
        out.append(Finding("error", "arch", "hipErrorNoBinaryForGpu: the build has no code object for this GPU's "
                           "gfx arch", _RUN_DOCTOR))
    if re.search(r"hipErrorInvalidDeviceFunction|HIP error: invalid device function", text):
        out.append(Finding("error", "arch", "'invalid device function': a kernel was not compiled for this GPU's "
                           "gfx arch (or an HSA_OVERRIDE_GFX_VERSION maps it to the wrong one)", _RUN_DOCTOR))
    for m in _CUDA_WARN.finditer(text):
        p = gfx.parse_sm(m.group(1))
        if p:
            v = gfx.check_nvidia(p[1], p[2], m.group(2).split())
            out.append(Finding("error" if v.blocking else "warn", "arch", v.message, v.fix))
    if "no kernel image is available for execution on the device" in text and not _CUDA_WARN.search(text):
        out.append(Finding("error", "arch", "CUDA: no kernel image for this GPU's SM arch in the build", _RUN_DOCTOR))
    if re.search(r"KeyError: '?libamd_smi\.so", text):
        out.append(Finding("error", "runtime", "`import amdsmi` failed: the amdsmi Python package is installed but "
                           "ROCm's libamd_smi.so is not found (KeyError, not ImportError)",
                           "install amd-smi-lib from ROCm (or set ROCM_PATH), or pip uninstall amdsmi"))
    return out
