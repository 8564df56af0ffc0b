"""A vLLM backend's close() shuts its engine down and frees it before waiting for the engine's processes (fakes; no
vLLM needed). Until 2026-12-07 close() held the engine in a local during the wait, so the engine outlived it."""

from __future__ import annotations

import weakref

from perfsuite.measure.backends.vllm_engine import EngineBackend


class _Core:
    def __init__(self) -> None:
        self.shut = False

    def shutdown(self) -> None:
        self.shut = True


class _Engine:
    def __init__(self) -> None:
        self.engine_core = _Core()


class _Procs:
    def __init__(self, ref: weakref.ref) -> None:
        self.ref = ref
        self.freed_before_reap: bool | None = None

    def reap(self) -> list[int]:
        self.freed_before_reap = self.ref() is None
        return [123]


def test_close_shuts_the_engine_down_and_frees_it_before_the_wait() -> None:
    backend = EngineBackend.__new__(EngineBackend)
    backend.engine, backend._info, backend._rpc_dir = _Engine(), {}, None
    core = backend.engine.engine_core
    backend._procs = procs = _Procs(weakref.ref(backend.engine))
    backend.close()
    assert core.shut and backend.engine is None
    assert procs.freed_before_reap is True
    assert backend.info()["killed_leftover_pids"] == [123]
