"""``perfsuite doctor``: device facts from the best source present, and problems predicted before they bite.

One module per source (``amdsmi_lib``, ``amd_smi_cli``, ``rocminfo``, ``rocm_smi``, ``kfd``, ``nvidia_smi`` with
NVML, torch in ``builds``); ``gfx`` holds the arch names and the decision table (device arch x build arch list x
``HSA_OVERRIDE_GFX_VERSION``); ``core`` collects and assesses; ``report`` renders.
"""

from __future__ import annotations

from perfsuite.machine.doctor.core import DEVICES, collect, machine_facts
from perfsuite.machine.doctor.explain import classify

__all__ = ["DEVICES", "classify", "collect", "machine_facts"]
