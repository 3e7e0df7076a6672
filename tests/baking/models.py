"""Small graphs for the bake tests, with float64 numpy forwards to check them against."""

from __future__ import annotations

import numpy as np

from rlx.ir import Activation, Binary, BinaryOp, Graph, Shape
from rlx.models import mlp_graph, mlp_weights, ternarize  # noqa: F401  (re-exported)


def mul_graph(n: int = 4, name: str = "mul_bake") -> Graph:
    """The reference's `y = x * w` (elementwise)."""
    g = Graph(name)
    x = g.input("x", Shape([n]))
    w = g.param("w", Shape([n]))
    g.set_outputs([g.binary(BinaryOp.MUL, x, w)])
    return g


def matmul_graph(k: int, n: int, m: int = 2) -> Graph:
    g = Graph("mm")
    x = g.input("x", Shape([m, k]))
    w = g.param("w", Shape([k, n]))
    g.set_outputs([g.add_node(Binary(BinaryOp.ADD), [g.matmul(x, w), x], name="y")
                   if k == n else g.matmul(x, w)])
    return g


def mlp_forward(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    w64 = {k: v.astype(np.float64) for k, v in w.items()}
    h = np.maximum(x.astype(np.float64) @ w64["w1"] + w64["b1"], 0)
    return h @ w64["w2"] + w64["b2"]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def tied_graph() -> Graph:
    """Two params that will be bound to identical bytes, and a scale constant to fold."""
    g = Graph("tied")
    x = g.input("x", Shape([3, 8]))
    wa = g.param("wa", Shape([8, 8]))
    wb = g.param("wb", Shape([8, 8]))
    two = g.constant(np.full((8, 8), 2, np.float32), name="two")
    wb2 = g.binary(BinaryOp.MUL, wb, two)  # weight-only math: folds to a constant
    ya = g.matmul(x, wa)
    yb = g.matmul(x, wb2)
    g.set_outputs([g.unary(Activation.TANH, g.binary(BinaryOp.ADD, ya, yb))])
    return g
