"""Models for the Ray tests: the engines' MLP (a symbolic batch dim, a float64 oracle) and a
one-row model whose batch dim is fixed at 1 (so it cannot batch)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlx.artifact import RlxFile, write_rlx
from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.elementwise import Binary, BinaryOp


@dataclass
class OneRow:
    path: Path
    w: np.ndarray

    def oracle(self, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        return (x.astype(np.float64) @ self.w) * scale


def write_one_row(path: Path, k: int = 8, n: int = 4) -> OneRow:
    """y[1, n] = (x[1, k] @ w) * scale[] (a scalar input, as silero-vad's `sr`)."""
    w = np.random.default_rng(3).standard_normal((k, n)).astype(np.float32)
    g = Graph("one_row")
    x = g.input("x", Shape((1, k), DType.F32))
    scale = g.input("scale", Shape((), DType.F32))
    g.set_outputs([g.add_node(Binary(BinaryOp.MUL), [g.matmul(x, g.constant(w)), scale],
                              name="y")])
    write_rlx(path, RlxFile.from_baked(g, []))
    return OneRow(path, w)
