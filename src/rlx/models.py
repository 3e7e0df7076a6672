"""The reference's example model, built in code: a two-layer MLP and its ternary rule.

`mlp_graph()` with its defaults is the reference's MNIST graph (784-64-10, batch 32), used by
the bake and artifact tests; the demo builds a smaller one for the 8x8 digits.
"""

from __future__ import annotations

import numpy as np

from rlx.ir import Activation, Binary, BinaryOp, Dim, Graph, Shape

__all__ = ["BATCH", "HIDDEN", "IN", "OUT", "mlp_graph", "mlp_weights", "ternarize"]

IN, HIDDEN, OUT, BATCH = 784, 64, 10, 32


def mlp_graph(batch: Dim = BATCH, n_in: int = IN, hidden: int = HIDDEN, n_out: int = OUT,
              name: str = "mnist_mlp") -> Graph:
    """`logits = relu(x @ w1 + b1) @ w2 + b2`, weights as params named as in the reference."""
    g = Graph(name)
    x = g.input("x", Shape([batch, n_in]))
    w1 = g.param("w1", Shape([n_in, hidden]))
    b1 = g.param("b1", Shape([hidden]))
    w2 = g.param("w2", Shape([hidden, n_out]))
    b2 = g.param("b2", Shape([n_out]))
    h = g.unary(Activation.RELU, g.binary(BinaryOp.ADD, g.matmul(x, w1), b1))
    g.set_outputs([g.add_node(Binary(BinaryOp.ADD), (g.matmul(h, w2), b2), name="logits")])
    return g


def ternarize(w: np.ndarray) -> np.ndarray:
    """The reference's rule: the smallest two thirds of |w| become 0, the rest their sign."""
    threshold = np.quantile(np.abs(w), 2 / 3)
    return np.where(np.abs(w) <= threshold, 0.0, np.sign(w)).astype(np.float32)


def mlp_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights for `mlp_graph()` with a ternary first layer (packs as TQ2_0)."""
    rng = np.random.default_rng(seed)
    return {
        "w1": ternarize(rng.standard_normal((IN, HIDDEN), np.float32)),
        "b1": rng.standard_normal(HIDDEN, np.float32) * np.float32(0.1),
        "w2": rng.standard_normal((HIDDEN, OUT), np.float32) * np.float32(0.1),
        "b2": rng.standard_normal(OUT, np.float32) * np.float32(0.1),
    }
