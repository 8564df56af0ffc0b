"""How the ONNX Runtime backend feeds its decoder: the dynamic layout (one session, the past grows each step) or the
static layout (fixed-capacity KV buffers; a prefill session and a decode session, each of which only ever sees one
input shape), with IO binding on device providers or with ``io_binding=true`` (docs/recipes.md, "The static-shape
ONNX decoder"). Both record the distinct input shapes each session was fed during a generation, the figure that
tells whether a compile-per-shape provider (MIGraphX) or a captured graph (CUDA/HIP graphs) can reuse its work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from perfsuite.measure.backends.onnxruntime import decoder_io
from perfsuite.measure.backends.onnxruntime import providers as pv

GRAPH_ID_ENTRY = "gpu_graph_id"  # RunOptions config key of the CUDA/ROCm EPs' graph annotation


class ShapeLog:
    """Distinct input-shape signatures per session, for the generation in progress and the last finished one."""

    def __init__(self) -> None:
        self.current: dict[str, set[tuple[tuple[int, ...], ...]]] = {}
        self.last: dict[str, set[tuple[tuple[int, ...], ...]]] | None = None

    def new_generation(self) -> None:
        if self.current:
            self.last = self.current
        self.current = {}

    def note(self, session: str, *shapes: tuple[int, ...]) -> None:
        self.current.setdefault(session, set()).add(shapes)

    def counts(self) -> dict[str, int]:
        """Distinct shapes per session in the last finished generation (the current one before any finished)."""
        log = self.last if self.last is not None else self.current
        return {k: len(v) for k, v in sorted(log.items())}


@dataclass
class State:
    past: list[Any]  # numpy arrays (plain run) or OrtValues (IO binding)
    past_len: int
    last: np.ndarray  # [B] int64, the token generated last (host)
    step: int = 0  # decode steps done in this generation


def _tokens(nxt: Any) -> list[int]:
    return [int(t) for t in np.asarray(nxt).reshape(-1).tolist()]


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape() if callable(getattr(x, "shape", None)) else x.shape)


class _Runner:
    """What both layouts share: the graph's input/output names, the shape log and one step (a plain run here)."""

    def __init__(self, sess: Any, cfg: pv.SessionConfig, meta: dict[str, Any]) -> None:
        self.cfg, self.meta = cfg, meta
        self.inputs = [i.name for i in sess.get_inputs()]
        self.outputs = [o.name for o in sess.get_outputs()]
        self.shapes = ShapeLog()
        self._feeds_past = True  # False where bound buffers hold the past: it stays out of the timed step's feeds

    def _step(self, sess: Any, name: str, ids: np.ndarray, past_len: int, past: list[Any], step: int,
              capacity: int | None = None) -> tuple[list[int], State]:
        feeds = decoder_io.step_feeds(self.inputs, ids, past_len, past if self._feeds_past else [], capacity)
        self.shapes.note(name, ids.shape, feeds["attention_mask"].shape, _shape(past[0]))
        nxt, present = self._run(sess, name, feeds, step)
        return _tokens(nxt), State(present, past_len + ids.shape[1], np.asarray(nxt, dtype=np.int64), step)

    def _run(self, sess: Any, name: str, feeds: dict[str, Any], step: int) -> tuple[Any, list[Any]]:
        """(next token, present) of one run."""
        outs = sess.run(["next_token", *self.outputs[2:]], feeds)
        return outs[0], outs[1:]


class DynamicRunner(_Runner):
    """The dynamic layout: one session, ``past`` grows by one slot per decode step (a new shape every step)."""

    layout = "dynamic"

    def __init__(self, sess: Any, cfg: pv.SessionConfig, meta: dict[str, Any]) -> None:
        super().__init__(sess, cfg, meta)
        self.sess = sess

    def prefill(self, ids: np.ndarray) -> tuple[list[int], State]:
        self.shapes.new_generation()
        return self._step(self.sess, "decoder", ids, 0, decoder_io.empty_past(self.meta, ids.shape[0]), 0)

    def decode(self, state: State) -> tuple[list[int], State]:
        return self._step(self.sess, "decoder", state.last.reshape(-1, 1), state.past_len, state.past, state.step + 1)

    def _run(self, sess: Any, name: str, feeds: dict[str, Any], step: int) -> tuple[Any, list[Any]]:
        if not self.cfg.io_binding:
            return super()._run(sess, name, feeds, step)
        import onnxruntime as ort

        b = sess.io_binding()
        for key, value in feeds.items():  # the past is on the device after the first step
            if isinstance(value, ort.OrtValue):
                b.bind_ortvalue_input(key, value)
            else:
                b.bind_cpu_input(key, value)
        b.bind_output("next_token", "cpu")
        b.bind_output("logits", self.cfg.io_device, self.cfg.device_id)
        for key in self.outputs[2:]:
            b.bind_output(key, self.cfg.io_device, self.cfg.device_id)
        sess.run_with_iobinding(b)
        outs = b.get_outputs()
        return outs[0].numpy(), list(outs[2:])

    def info(self) -> dict[str, Any]:
        return {"sessions": 1}


class StaticRunner(_Runner):
    """The static layout: a prefill session pinned to ``[batch, prompt]`` and a decode session pinned to
    ``[batch, 1]``, both over KV buffers of ``capacity`` slots (free-dimension overrides)."""

    layout = "static"

    def __init__(self, prefill_sess: Any, decode_sess: Any, cfg: pv.SessionConfig, meta: dict[str, Any],
                 batch: int, prompt: int, capacity: int, graph: bool = False) -> None:
        super().__init__(decode_sess, cfg, meta)
        self.prefill_sess, self.decode_sess = prefill_sess, decode_sess
        self.batch, self.prompt, self.capacity, self.graph = batch, prompt, capacity, graph
        self._zero_past = decoder_io.empty_past(meta, batch, capacity)
        self._bound: _BoundBuffers | None = _BoundBuffers(self) if cfg.io_binding else None
        self._feeds_past = self._bound is None

    def prefill(self, ids: np.ndarray) -> tuple[list[int], State]:
        self.shapes.new_generation()
        if ids.shape != (self.batch, self.prompt):
            raise decoder_io.ExportError(f"static decoder sessions are pinned to batch {self.batch} x prompt "
                                         f"{self.prompt}; got prompts of shape {ids.shape}")
        return self._step(self.prefill_sess, "prefill", ids, 0, self._zero_past, 0, self.capacity)

    def decode(self, state: State) -> tuple[list[int], State]:
        return self._step(self.decode_sess, "decode", state.last.reshape(-1, 1), state.past_len, state.past,
                          state.step + 1, self.capacity)

    def _run(self, sess: Any, name: str, feeds: dict[str, Any], step: int) -> tuple[Any, list[Any]]:
        if self._bound is None:
            return super()._run(sess, name, feeds, step)
        return self._bound.run(sess, name, feeds, step)

    def info(self) -> dict[str, Any]:
        return {"sessions": 2, "capacity": self.capacity, "prefill_shape": [self.batch, self.prompt],
                "decode_shape": [self.batch, 1], "bound_buffers": self._bound is not None,
                "graph_ids": list(_BoundBuffers.GRAPH_IDS) if self.graph else None}


class _BoundBuffers:
    """Preallocated OrtValues for the static runner's IO binding: inputs updated in place, the KV cache in two sets
    used alternately (ping-pong: the past of step k is the present of step k - 1, and ORT must not read and write one
    buffer in one run), so every prefill and every other decode step run on the same addresses; with ``enable_graph``
    each of the three bindings (prefill, even decode step, odd decode step) has its own ``gpu_graph_id``, one
    captured graph each."""

    GRAPH_IDS = (1, 2, 3)  # prefill, even decode steps, odd decode steps

    def __init__(self, runner: StaticRunner) -> None:
        import onnxruntime as ort

        r = runner
        dev, dev_id = r.cfg.io_device, r.cfg.device_id

        def ov(arr: np.ndarray) -> Any:
            return ort.OrtValue.ortvalue_from_numpy(arr, dev, dev_id)

        b = r.batch
        self.kv = [[ov(np.zeros_like(z)) for z in r._zero_past], [ov(np.zeros_like(z)) for z in r._zero_past]]
        self.ids = {"prefill": ov(np.zeros((b, r.prompt), np.int64)), "decode": ov(np.zeros((b, 1), np.int64))}
        self.pos = {"prefill": ov(np.zeros((b, r.prompt), np.int64)), "decode": ov(np.zeros((b, 1), np.int64))}
        self.mask = ov(np.zeros((b, r.capacity), np.int64))
        self.next_token = ov(np.zeros((b,), np.int64))
        vocab = int(r.meta["geometry"]["vocab"])
        self.logits = ov(np.zeros((b, vocab), np.dtype(r.meta["dtype"])))
        self.bindings: dict[tuple[str, int], Any] = {}
        self.run_options: dict[tuple[str, int], Any] = {}
        for phase, src in (("prefill", 0), ("decode", 0), ("decode", 1)):
            sess = r.prefill_sess if phase == "prefill" else r.decode_sess
            bind = sess.io_binding()
            bind.bind_ortvalue_input("input_ids", self.ids[phase])
            bind.bind_ortvalue_input("attention_mask", self.mask)
            bind.bind_ortvalue_input("position_ids", self.pos[phase])
            for name, value in zip(r.inputs[3:], self.kv[src], strict=True):
                bind.bind_ortvalue_input(name, value)
            bind.bind_ortvalue_output("logits", self.logits)
            bind.bind_ortvalue_output("next_token", self.next_token)
            for name, value in zip(r.outputs[2:], self.kv[1 - src], strict=True):
                bind.bind_ortvalue_output(name, value)
            self.bindings[(phase, src)] = bind
            ro = ort.RunOptions()
            if r.graph:
                ro.add_run_config_entry(GRAPH_ID_ENTRY, str(self.GRAPH_IDS[len(self.run_options)]))
            self.run_options[(phase, src)] = ro

    def run(self, sess: Any, phase: str, feeds: dict[str, Any], step: int) -> tuple[Any, list[Any]]:
        # prefill reads set 0 and writes set 1; decode step k reads the set step k-1 wrote: 1, 0, 1, ...
        src = 0 if step == 0 else step % 2
        self.ids[phase].update_inplace(feeds["input_ids"])
        self.pos[phase].update_inplace(feeds["position_ids"])
        self.mask.update_inplace(feeds["attention_mask"])
        sess.run_with_iobinding(self.bindings[(phase, src)], self.run_options[(phase, src)])
        # the device -> host copy that ends the step (a copy: the buffer is reused)
        return np.array(self.next_token.numpy()), self.kv[1 - src]
