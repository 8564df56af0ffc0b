"""Root conftest: pytester for the plugin's own tests, and the hypothesis profiles (ci, nightly, gpu-smoke).

The perfsuite plugin itself loads through its pytest11 entry point.
"""

from perfsuite.ops.profiles import load_profile, register_profiles

pytest_plugins = ["pytester"]

register_profiles()
load_profile()
