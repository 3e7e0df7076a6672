"""`rlx-bake demo`: build a small MLP in code, bake it with every profile and memory mode,
run each result and compare it with the unbaked graph.

The weights mimic the reference's MNIST example: the first layer is ternarised (so the exact
and size profiles pack it as TQ2_0), the second is dense (Q8_0 under the size profile).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from rlx.bake import BakeOptions, BakeProfile, MemoryMode, bake
from rlx.ir import Activation, Binary, BinaryOp, Graph, Shape
from rlx.runtime import Session

IN, HIDDEN, OUT, BATCH = 784, 64, 10, 32


def mlp_graph() -> Graph:
    """relu(x @ w1 + b1) @ w2 + b2 with weights as params, as in the reference."""
    g = Graph("mnist_mlp")
    x = g.input("x", Shape([BATCH, IN]))
    w1 = g.param("w1", Shape([IN, HIDDEN]))
    b1 = g.param("b1", Shape([HIDDEN]))
    w2 = g.param("w2", Shape([HIDDEN, OUT]))
    b2 = g.param("b2", Shape([OUT]))
    h = g.unary(Activation.RELU, g.binary(BinaryOp.ADD, g.matmul(x, w1), b1))
    y = g.add_node(g.node(g.binary(BinaryOp.ADD, g.matmul(h, w2), b2)).op,
                   g.node(len(g) - 1).inputs, name="logits") if False else \
        g.binary(BinaryOp.ADD, g.matmul(h, w2), b2)
    g.set_outputs([y])
    return g


def ternarize(w: np.ndarray) -> np.ndarray:
    """The reference's rule: the smallest two thirds of |w| become 0, the rest their sign."""
    threshold = np.quantile(np.abs(w), 2 / 3)
    return np.where(np.abs(w) <= threshold, 0.0, np.sign(w)).astype(np.float32)


def mlp_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w1": ternarize(rng.standard_normal((IN, HIDDEN), np.float32)),
        "b1": rng.standard_normal(HIDDEN, np.float32) * 0.1,
        "w2": rng.standard_normal((HIDDEN, OUT), np.float32) * np.float32(0.1),
        "b2": rng.standard_normal(OUT, np.float32) * 0.1,
    }


@dataclass(frozen=True)
class DemoRow:
    profile: str
    memory: str
    nodes: int
    weight_bytes: int
    graph_bytes: int
    ratio: float  # raw float32 weight bytes / bytes stored
    compile_ms: float
    max_abs_err: float


def run_demo() -> list[DemoRow]:
    graph, weights = mlp_graph(), mlp_weights()
    x = np.random.default_rng(1).standard_normal((BATCH, IN), np.float32)
    raw = sum(w.nbytes for w in weights.values())
    expected = _reference_forward(x, weights)
    rows = []
    for profile in BakeProfile:
        for memory in MemoryMode:
            opts = BakeOptions.from_profile(profile).replace(memory=memory)
            file, report = bake(graph, weights, opts)
            start = time.perf_counter()
            compiled = Session().compile(file.into_runtime_graph())
            compile_ms = (time.perf_counter() - start) * 1e3
            (y,) = compiled.run({"x": x})
            stored = max(report.weight_bytes, report.constant_bytes)
            rows.append(DemoRow(profile.value, memory.value, report.nodes_after,
                                report.weight_bytes, report.constant_bytes, raw / stored,
                                compile_ms, float(np.max(np.abs(y - expected)))))
    return rows


def _reference_forward(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    """The same MLP in float64 numpy: the yardstick for every baked variant."""
    x64 = {k: v.astype(np.float64) for k, v in w.items()}
    h = np.maximum(x.astype(np.float64) @ x64["w1"] + x64["b1"], 0)
    return h @ x64["w2"] + x64["b2"]


__all__ = ["DemoRow", "mlp_graph", "mlp_weights", "run_demo", "ternarize"]
