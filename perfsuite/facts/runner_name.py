"""The rule for a runner class name: it names a folder (``baselines/<class>/``, ``baselines/known_gaps/<class>.toml``),
so every class, detected or given as an override, is a slug of lowercase letters, digits and ``-``. Its first
component is its *family* (``cpu``, ``rocm``, ``cuda``): the device kind. How a machine's class is detected is
perfsuite.machine.runner_class."""

from __future__ import annotations

import re

MAX_LENGTH = 80
_SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
# Folder names a class must not take: files beside the class folders in baselines/ and baselines/known_gaps/,
# and names Windows reserves for devices (a DirectML runner keeps its baselines on NTFS).
_WINDOWS = "a device name on Windows, where a DirectML runner keeps its baselines"
RESERVED: dict[str, str] = {
    "known_gaps": "the folder of operator gap lists, baselines/known_gaps/",
    "known-gaps": "too close to baselines/known_gaps/, the folder of operator gap lists",
    "all": "baselines/known_gaps/all.toml lists the gaps of every runner class",
    **{n: _WINDOWS for n in ("con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)),
                             *(f"lpt{i}" for i in range(1, 10)))},
}


def validate(name: object, source: str = "runner class") -> str:
    """``name`` if it is a usable runner class, else ValueError naming the value, the rule and the fix; ``source``
    says where the value came from (``--perf-runner-class``, ``PERFSUITE_RUNNER_CLASS`` ...)."""
    rule = (f"a runner class names a folder under baselines/, so it must be 1-{MAX_LENGTH} lowercase letters, "
            "digits and '-', starting and ending with a letter or digit")
    if not isinstance(name, str):
        raise ValueError(f"{source} {name!r}: not a string; {rule}")
    example = "use a name such as 'cpu-amd-epyc-avx2-2c'"
    if "/" in name or "\\" in name or ".." in name or name.startswith("~"):
        raise ValueError(f"{source} {name!r}: a path, not a name; {rule}; {example}")
    suggestion = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:MAX_LENGTH].strip("-")
    fix = f"did you mean {suggestion!r}?" if suggestion and suggestion not in RESERVED else example
    if len(name) > MAX_LENGTH:
        raise ValueError(f"{source} {name[:40]!r}... is {len(name)} characters long; {rule}; {example}")
    if name.lower() in RESERVED:
        raise ValueError(f"{source} {name!r}: a reserved name ({RESERVED[name.lower()]}); pick a name that says "
                         "what decides speed, such as 'cpu-amd-epyc-avx2-2c'")
    if not _SLUG.match(name):
        raise ValueError(f"{source} {name!r}: {rule}; {fix}")
    return name


def family(name: str) -> str:
    """The device kind a class belongs to: its first ``-`` component (``cpu-amd-epyc-avx2-2c`` -> ``cpu``)."""
    return name.split("-", 1)[0]
