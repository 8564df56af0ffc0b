"""perfsuite: a pytest-based performance regression suite for LLM inference.

Public facade; the heavy parts (backends) are imported lazily by name.
"""

from __future__ import annotations

__version__ = "0.1.0"

from perfsuite.facts.cells import Cell, Scenario
from perfsuite.facts.config import ConfigError, PerfConfig, Profile, Settings

__all__ = ["Cell", "ConfigError", "PerfConfig", "Profile", "Scenario", "Settings", "__version__"]
