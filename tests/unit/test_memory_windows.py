"""perfsuite.machine.memory imports where ``resource`` does not exist (Windows, the DirectML backend's home)."""

from __future__ import annotations

import builtins
import importlib
import sys
from collections.abc import Iterator

import pytest

import perfsuite.machine.memory


@pytest.fixture
def no_resource(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``import resource`` raises ImportError, as on Windows; perfsuite.machine.memory is re-imported under it."""
    monkeypatch.setitem(sys.modules, "resource", None)
    importlib.reload(perfsuite.machine.memory)
    yield
    monkeypatch.undo()
    importlib.reload(perfsuite.machine.memory)


def test_memory_imports_without_resource(no_resource: None) -> None:
    assert perfsuite.machine.memory.resource is None
    peak = perfsuite.machine.memory.peak_rss_bytes()  # Linux still has /proc
    assert peak is not None and peak > 0


@pytest.fixture
def psutil_mod():
    return pytest.importorskip("psutil")


def test_peak_without_proc_or_resource_uses_psutil(psutil_mod, no_resource: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    psutil = psutil_mod
    real_open = builtins.open

    def no_proc(path, *a, **k):
        if str(path).startswith("/proc/self/"):  # what perfsuite.machine.memory reads (psutil reads /proc/<pid>)
            raise FileNotFoundError(path)
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", no_proc)
    peak = perfsuite.machine.memory.peak_rss_bytes()
    rss = psutil.Process().memory_info().rss
    assert peak is not None and peak >= rss // 2  # peak_wset on Windows; the current RSS (a lower bound) here
    assert perfsuite.machine.memory.reset_peak_rss() is False  # not resettable there: said, not faked


def test_ort_backend_module_imports_without_resource(no_resource: None, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    # re-imported fresh; the fixture's undo puts the original module object back for the other tests
    monkeypatch.delitem(sys.modules, "perfsuite.measure.backends.onnxruntime.backend", raising=False)
    mod = importlib.import_module("perfsuite.measure.backends.onnxruntime.backend")
    assert mod.memory is perfsuite.machine.memory
