"""perfsuite.measure.serving.cell.started_server replaced by the in-thread stub server (serve_stub.Stub): serving cells,
``perfsuite calibrate`` and ab's serving replicates run against it in seconds. Its delays and capacity come from
STUB_TTFT_S, STUB_ITL_S and STUB_MAX_INFLIGHT (env), so two A/B sides can run servers that differ.

As a program it is a side's "python" for ab: ``-m perfsuite.measure.serving.replicate ...`` runs with the stub patched in;
anything else is handed to the real interpreter unchanged."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from serve_stub import Stub


class _Proc:
    pid = os.getpid()


class StubServer:
    """What serving cells use of a perfsuite.measure.serving.server.Server."""

    def __init__(self, stub: Stub) -> None:
        self.stub, self.name, self.start_s, self.proc = stub, f"stub server (port {stub.port})", 0.0, _Proc()
        self.base_url = stub.base_url
        self.client_cpus: list[int] | None = None  # the stub is a thread of this process: no cores of its own

    def check(self) -> None:
        return None

    def abort_reason(self) -> str | None:
        return None


@contextlib.contextmanager
def started_stub(model: str, *, cache_dir: Path | None = None, **_: Any) -> Iterator[tuple[Any, str, int, Path]]:
    env = os.environ
    stub = Stub(ttft_s=float(env.get("STUB_TTFT_S", "0.005")), itl_s=float(env.get("STUB_ITL_S", "0.002")),
                max_inflight=int(env.get("STUB_MAX_INFLIGHT", "0")))
    # without a cache_dir, a temporary one that goes with the server (a mkdtemp here left one in /tmp per start)
    cache = contextlib.nullcontext(str(cache_dir)) if cache_dir else tempfile.TemporaryDirectory(prefix="stub-cache-")
    with stub, cache as folder:
        yield StubServer(stub), "stub", 2048, Path(folder)


def main() -> int:
    if sys.argv[1:3] != ["-m", "perfsuite.measure.serving.replicate"]:
        os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
    from perfsuite.measure.serving import cell, replicate

    cell.started_server = started_stub  # type: ignore[assignment]
    return replicate.main(sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())
