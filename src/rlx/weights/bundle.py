"""`WeightBundle`: weights loaded from a file, ready to bind to a graph's params."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class LoadedWeight:
    """A tensor kept in its source encoding (e.g. a GGUF Q8_0 block stream)."""

    name: str
    shape: tuple[int, ...]  # logical shape
    encoding: str
    data: np.ndarray  # flat uint8 view of the encoded bytes


@dataclass
class WeightBundle:
    """Dense tensors by name (native dtypes, often memory-mapped) plus packed ones."""

    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    packed: list[LoadedWeight] = field(default_factory=list)
    source: str = ""
