"""ONNX Runtime sessions for single-op graphs, through the ORT backend's provider module.

``perfsuite.backends.onnxruntime.providers`` owns the mapping backend name -> execution provider + provider
options (``build_session_config``) and node-placement counting (``count_assignment``); this module only turns a
:class:`SessionConfig` into an ``InferenceSession`` and reports where the nodes ran. Device EPs are created
non-strict (CPU fallback allowed) so that a fallback is *observed* and classified, not refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfsuite.backends.onnxruntime import providers as P

LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "all": "ORT_ENABLE_ALL"}


@dataclass
class Placement:
    requested: str
    providers_in_use: list[str]
    nodes_per_ep: dict[str, int]

    @property
    def cpu_nodes(self) -> int:
        return int(self.nodes_per_ep.get(P.CPU_EP, 0))

    @property
    def total_nodes(self) -> int:
        return int(sum(self.nodes_per_ep.values()))

    def fallback_reason(self) -> str | None:
        """Why this session is not really running on ``requested`` (None if it is)."""
        if not self.providers_in_use or self.providers_in_use[0] != self.requested:
            return f"requested {P.short_ep(self.requested)}, session runs on {self.providers_in_use or 'nothing'}"
        if self.requested != P.CPU_EP and self.cpu_nodes:
            return (f"{self.cpu_nodes}/{self.total_nodes} node(s) placed on CPUExecutionProvider "
                    f"(nodes per EP: {self.nodes_per_ep})")
        return None

    def as_dict(self) -> dict[str, Any]:
        return {"requested": self.requested, "providers_in_use": self.providers_in_use,
                "nodes_per_ep": self.nodes_per_ep}


def availability(backend: str) -> str | None:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        return f"onnxruntime not importable: {exc}"
    return P.availability_reason(backend, ort.get_available_providers(), ort.__version__)


def make_session(model_bytes: bytes, backend: str, dtype: str, options: dict[str, Any] | None = None) -> Any:
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # run-time kernel errors are classified, not printed
    opts = {"strict": False} if P.ep_of(backend) != P.CPU_EP else {}
    opts.update(options or {})
    cfg = P.build_session_config(backend, dtype, opts, ort.__version__)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[cfg.graph_optimization_level])
    for k, v in cfg.config_entries.items():
        so.add_session_config_entry(k, v)
    for k, v in cfg.session_attrs.items():
        if k == "execution_mode":
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        else:
            setattr(so, k, v)
    return ort.InferenceSession(model_bytes, so, providers=cfg.providers, provider_options=cfg.provider_options)


def placement(sess: Any, backend: str) -> Placement:
    requested = P.ep_of(backend)
    counts: dict[str, int] = {}
    getter = getattr(sess, "get_provider_graph_assignment_info", None)
    if getter is not None:
        try:
            counts = P.count_assignment(getter())
        except Exception:  # older ORT / assignment not recorded: providers-in-use check only
            counts = {}
    return Placement(requested, list(sess.get_providers()), counts)
