"""ONNX Runtime sessions for single-op graphs (providers and options from the ORT backend's ``providers``), and
where their nodes ran. Device EPs are created non-strict (CPU fallback allowed): a fallback is *observed* and
classified, not refused.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from perfsuite.measure.backends.onnxruntime import providers as P


@dataclass
class Placement:
    requested: str
    providers_in_use: list[str]
    nodes_per_ep: dict[str, int]

    def fallback_reason(self) -> str | None:
        """Why this session is not really running on ``requested`` (None if it is)."""
        if not self.providers_in_use or self.providers_in_use[0] != self.requested:
            return f"requested {P.short_ep(self.requested)}, session runs on {self.providers_in_use or 'nothing'}"
        nodes = P.cpu_node_summary(self.nodes_per_ep)
        if self.requested != P.CPU_EP and nodes["cpu_node_count"]:
            return (f"{nodes['cpu_node_count']}/{nodes['total_node_count']} node(s) placed on CPUExecutionProvider "
                    f"(nodes per EP: {self.nodes_per_ep})")
        return None


def availability(backend: str) -> str | None:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        return f"onnxruntime not importable: {exc}"
    return P.availability_reason(backend, ort.get_available_providers(), ort.__version__)


def make_session(model_bytes: bytes, backend: str, dtype: str) -> Any:
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # run-time kernel errors are classified, not printed
    opts = {"strict": False} if P.ep_of(backend) != P.CPU_EP else {}
    cfg = P.build_session_config(backend, dtype, opts, ort.__version__)
    return ort.InferenceSession(model_bytes, P.session_options(ort, cfg), providers=cfg.providers,
                                provider_options=cfg.provider_options)


def placement(sess: Any, backend: str) -> Placement:
    counts: dict[str, int] = {}
    with contextlib.suppress(Exception):  # older ORT / assignment not recorded: providers-in-use check only
        counts = P.count_assignment(sess.get_provider_graph_assignment_info())
    return Placement(P.ep_of(backend), list(sess.get_providers()), counts)
