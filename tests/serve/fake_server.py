"""A server process for the lifecycle tests: the stub on a given port, with a child process of its own (as vLLM's
API server has its engine core), or a start that fails or never becomes healthy.

    python fake_server.py PORT [ok|fail|hang|die-after-S] [TTFT_S ITL_S]
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from serve_stub import Stub


def main() -> None:
    port, mode = int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "ok"
    from perfsuite.measure.serving.server import _die_with_parent  # as vLLM's engine core: it ends with its API server

    # as vLLM's processes do: a unix socket per engine link in VLLM_RPC_BASE_PATH, never removed
    rpc = socket.socket(socket.AF_UNIX)
    rpc.bind(os.path.join(os.environ.get("VLLM_RPC_BASE_PATH", "/nonexistent"), "fake-engine-link"))
    print(f"fake server: rpc {rpc.getsockname()}", flush=True)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], preexec_fn=_die_with_parent)
    print(f"fake server: child {child.pid}", flush=True)
    if mode == "fail":
        print("fake server: ValueError: no such model /nonexistent", flush=True)
        sys.exit(3)
    if mode == "hang":
        time.sleep(600)
    ttft, itl = (float(sys.argv[3]), float(sys.argv[4])) if len(sys.argv) > 4 else (0.01, 0.05)
    with Stub(ttft_s=ttft, itl_s=itl, port=port):
        print(f"fake server: listening on {port}", flush=True)
        deadline = time.monotonic() + (float(mode.split("-")[-1]) if mode.startswith("die-after") else 600)
        while time.monotonic() < deadline:
            time.sleep(0.05)
    print("fake server: dying", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
