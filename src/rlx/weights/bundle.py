"""`WeightBundle`: weights loaded from a file, ready to bind to a graph's params."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlx.deferred import Payload
from rlx.weights.policy import F32FirstVerdict, WeightSourceInfo

__all__ = ["LoadedWeight", "WeightBundle"]


@dataclass(frozen=True)
class LoadedWeight:
    """A tensor kept in its source encoding (e.g. a GGUF Q8_0 block stream)."""

    name: str
    shape: tuple[int, ...]  # logical shape
    encoding: str
    data: np.ndarray  # flat uint8 view of the encoded bytes


@dataclass
class WeightBundle:
    """Dense tensors by name (native dtypes, often memory-mapped; large decoded ones
    `Deferred`: `np.asarray` reads them) plus packed ones.

    A name is in `tensors` or in `packed`, never both. `verdict` and `info` say how a loader
    decided about packed source tensors (None for bundles built from plain arrays).
    """

    tensors: dict[str, Payload] = field(default_factory=dict)
    packed: list[LoadedWeight] = field(default_factory=list)
    source: str = ""
    verdict: F32FirstVerdict | None = None
    info: WeightSourceInfo | None = None
    # names of matrices stored `[N, K]` (GGUF orientation): a dense one bound to a MatMul's
    # `[K, N]` weight is transposed, as the packed path reads the same bytes as BT
    bt: frozenset[str] = frozenset()
