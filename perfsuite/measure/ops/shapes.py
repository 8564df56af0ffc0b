"""Hypothesis strategies for LLM-shaped operator inputs: a :class:`Shape` per draw, within :data:`BOUNDS`
(docs/ops.md, "Shapes")."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from hypothesis import strategies as st

SHAPE_CLASSES = ("unit", "decode", "prefill", "long", "tile_edge", "odd")
PRIMES = (3, 5, 7, 11, 13, 17, 31, 37, 61, 67, 97, 127, 131, 251, 257, 509, 521, 1021, 2039, 4093, 8191, 32003)


@dataclass(frozen=True)
class Bounds:
    name: str
    max_batch: int
    max_new: int  # prefill tokens
    max_past: int  # decode cache length
    max_long: int  # long class: prompt or cache length
    max_kv_heads: int
    max_ratio: int  # GQA heads / kv_heads
    head_dims: tuple[int, ...]
    max_hidden: int
    max_vocab: int
    tiles: tuple[int, ...]
    max_ref_flops: float  # skip-free cap: dims are shrunk until the float64 reference fits


BOUNDS = {
    "small": Bounds("small", max_batch=4, max_new=48, max_past=96, max_long=512, max_kv_heads=4, max_ratio=4,
                    head_dims=(32, 64, 80, 96, 128), max_hidden=512, max_vocab=4096, tiles=(16, 32, 64),
                    max_ref_flops=4e7),
    "large": Bounds("large", max_batch=64, max_new=2048, max_past=8192, max_long=16384, max_kv_heads=16,
                    max_ratio=8, head_dims=(64, 80, 96, 128), max_hidden=8192, max_vocab=152064,
                    tiles=(16, 32, 64, 128, 256), max_ref_flops=2e10),
}


@dataclass(frozen=True)
class Shape:
    shape_class: str
    batch: int
    new: int
    past: int
    kv_heads: int
    ratio: int
    head_dim: int
    hidden: int
    inter: int
    vocab: int
    group: int  # int4 quantization group (block) size
    topk: int

    @property
    def heads(self) -> int:
        return self.kv_heads * self.ratio

    @property
    def total(self) -> int:
        return self.past + self.new

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Shape:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})

    def describe(self) -> str:
        return (f"{self.shape_class}: batch={self.batch} new={self.new} past={self.past} heads={self.heads}/"
                f"{self.kv_heads} head_dim={self.head_dim} hidden={self.hidden} inter={self.inter} "
                f"vocab={self.vocab} group={self.group} topk={self.topk}")


def _edge(tiles: tuple[int, ...], lo: int, hi: int) -> st.SearchStrategy[int]:
    vals = sorted({t + d for t in tiles for d in (-1, 0, 1) if lo <= t + d <= hi})
    return st.sampled_from(vals or [lo])


def _odd(lo: int, hi: int) -> st.SearchStrategy[int]:
    primes = [p for p in PRIMES if lo <= p <= hi]
    odd = st.integers(lo, max(lo, hi)).map(lambda n: n | 1).filter(lambda n: lo <= n <= hi)
    return st.one_of(st.sampled_from(primes), odd) if primes else odd


def fit(shape: Shape, b: Bounds) -> Shape:
    """Shrink batch / kv heads / sequence until the float64 reference cost fits ``b.max_ref_flops``."""
    def cost(s: Shape) -> float:
        attn = 2.0 * s.batch * s.heads * s.new * s.total * s.head_dim * 2
        lin = 2.0 * s.batch * s.new * s.hidden * max(s.vocab, s.inter)
        return max(attn, lin)

    odd = shape.shape_class == "odd"

    def half(n: int) -> int:
        return max(1, n // 2 | 1 if odd else n // 2)

    while cost(shape) > b.max_ref_flops:
        s = shape  # the first dimension in this order that may shrink is halved
        steps: tuple[tuple[str, bool, Any], ...] = (
            ("batch", s.batch > 1, half(s.batch) if s.batch > 2 else 1), ("kv_heads", s.kv_heads > 1, s.kv_heads // 2),
            ("ratio", s.ratio > 1, s.ratio // 2), ("vocab", s.vocab > 256 and s.vocab >= s.inter, half(s.vocab)),
            ("new", s.new > 2 and s.new >= s.past, half(s.new)), ("past", s.past > 2, half(s.past)),
            ("inter", s.inter > 64, half(s.inter)))
        step = next(((name, value) for name, due, value in steps if due), None)
        if step is None:
            break
        shape = replace(shape, **dict([step]))
    return shape


@st.composite
def llm_shapes(draw: Any, shape_class: str, bounds: Bounds | str = "small") -> Shape:
    b = BOUNDS[bounds] if isinstance(bounds, str) else bounds
    ratio = draw(st.sampled_from([r for r in (1, 2, 4, 8) if r <= b.max_ratio]))
    head_dim = draw(st.sampled_from(b.head_dims))
    group = draw(st.sampled_from((32, 64, 128)))
    if shape_class == "unit":
        return Shape("unit", batch=1, new=1, past=draw(st.sampled_from((0, 1))), kv_heads=1, ratio=1,
                     head_dim=min(b.head_dims), hidden=8, inter=8, vocab=draw(st.sampled_from((1, 2, 8))),
                     group=32, topk=1)
    if shape_class in ("decode", "prefill"):
        batch = draw(st.integers(1, b.max_batch))
        new, past = ((1, draw(st.integers(1, b.max_past))) if shape_class == "decode"
                     else (draw(st.integers(2, b.max_new)), 0))
        hidden = draw(st.sampled_from([h for h in (64, 128, 256, 512, 1024, 2048, 4096, 8192) if h <= b.max_hidden]))
    elif shape_class == "long":
        batch, n = 1, st.integers(b.max_long // 2, b.max_long)
        new, past = (draw(n), 0) if draw(st.booleans()) else (1, draw(n))
        hidden = b.max_hidden
    elif shape_class == "tile_edge":
        batch = draw(st.sampled_from([x for x in (1, 2, 3, 4, 7, 8, 9, 15, 16, 17) if x <= b.max_batch]))
        new = draw(_edge(b.tiles, 1, b.max_new))
        past = draw(st.one_of(st.just(0), _edge(b.tiles, 1, b.max_past)))
        hidden = draw(_edge(b.tiles + (128, 256, 512), 8, b.max_hidden))
        vocab = draw(_edge(b.tiles + (256, 1024, 4096, 32000), 2, b.max_vocab))
        inter = draw(_edge(b.tiles + (256,), 8, 4 * b.max_hidden))
    elif shape_class == "odd":
        batch = draw(_odd(1, b.max_batch))
        new = draw(_odd(1, b.max_new))
        past = draw(st.one_of(st.just(0), _odd(1, b.max_past)))
        hidden = draw(_odd(9, b.max_hidden))
        vocab = draw(_odd(3, b.max_vocab))
        inter = draw(_odd(9, 4 * b.max_hidden))
    else:
        raise ValueError(f"unknown shape class {shape_class!r}; use one of {', '.join(SHAPE_CLASSES)}")
    if shape_class in ("decode", "prefill", "long"):
        vocab = draw(st.sampled_from([v for v in (256, 1024, 2048, 4096, 32000, 32064, 128256, 152064)
                                      if v <= b.max_vocab]))
        inter = draw(st.sampled_from([i for i in (2 * hidden, int(hidden * 8 / 3) // 8 * 8, 4 * hidden) if i >= 8]))
    kv_heads = draw(st.integers(1, b.max_kv_heads))
    topk = draw(st.sampled_from([k for k in (1, 2, 5, 40, 50) if k <= vocab] or [1]))
    return fit(Shape(shape_class, batch=batch, new=new, past=past, kv_heads=kv_heads, ratio=ratio,
                     head_dim=head_dim, hidden=hidden, inter=inter, vocab=vocab, group=group, topk=topk), b)


def canonical(bounds: Bounds | str = "small") -> dict[str, list[Shape]]:
    """Hand-picked shapes per class, used as ``@example``s so every run covers them before searching."""
    b = BOUNDS[bounds] if isinstance(bounds, str) else bounds
    small = b.name == "small"
    hid = 256 if small else 4096
    voc = 2048 if small else 32000
    mk = Shape
    out = {
        "unit": [mk("unit", 1, 1, 0, 1, 1, min(b.head_dims), 8, 8, 8, 32, 1)],
        "decode": [mk("decode", 1, 1, 63 if small else 2047, 2, 4, 128, hid, 3 * hid, voc, 128, 50),
                   mk("decode", 4 if small else 32, 1, 17, 1, 8 if b.max_ratio >= 8 else 4, 64, hid, 2 * hid, voc,
                      64, 1)],
        "prefill": [mk("prefill", 1, 32 if small else 512, 0, 2, 2, 64, hid, 2 * hid, voc, 128, 5),
                    mk("prefill", 2, 7, 0, 1, 1, 80, hid, 4 * hid, voc, 32, 40)],
        "long": [mk("long", 1, 1, b.max_long, 1, 2, 64, hid, 2 * hid, voc, 128, 50)],
        "tile_edge": [mk("tile_edge", 1, 65, 0, 1, 1, 96, 129, 255, 4097 if not small else 1025, 64, 1),
                      mk("tile_edge", 3, 63, 64, 2, 2, 64, 127, 257, 63, 32, 2)],
        "odd": [mk("odd", 3, 13, 31, 1, 2, 80, 97, 131, 509, 32, 5)],
    }
    return {k: [fit(s, b) for s in v] for k, v in out.items()}
