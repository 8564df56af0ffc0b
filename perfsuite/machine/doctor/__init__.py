"""``perfsuite doctor``: device facts from the best source present, and problems predicted before they bite.

Sources, one module each, in order of preference: ``amdsmi_lib`` (the amdsmi Python package), ``amd_smi_cli``
(``amd-smi static --json``, ROCm 6 and 7 shapes), ``rocminfo``, ``rocm_smi``, ``kfd`` (sysfs topology), ``nvml``,
``nvidia_smi``, then ``torch_probe``. ``gfx`` holds the arch names and the decision table (device arch x build arch
list x ``HSA_OVERRIDE_GFX_VERSION``); ``core`` collects and assesses; ``report`` renders.
"""

from __future__ import annotations

from perfsuite.machine.doctor.core import DEVICES, Report, assess, collect, machine_facts
from perfsuite.machine.doctor.explain import classify
from perfsuite.machine.doctor.facts import Finding, Gpu, SourceResult
from perfsuite.machine.doctor.gfx import ArchVerdict, check_amd, check_nvidia
from perfsuite.machine.doctor.host import Host

__all__ = ["DEVICES", "ArchVerdict", "Finding", "Gpu", "Host", "Report", "SourceResult", "assess", "check_amd",
           "check_nvidia", "classify", "collect", "machine_facts"]
