"""Small baked files for the engine tests, each with an independent float64 oracle."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from rlx.artifact import RlxFile, write_rlx
from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.elementwise import Activation, BinaryOp
from rlx.ir.ops.nn import Softmax

ENGINES = ["numpy", "onnxruntime", "openvino"]


def require(engine: str) -> None:
    """Engines are part of rlx[dev]: a missing one is a broken set-up, not a skip."""
    module = {"numpy": "numpy", "onnxruntime": "onnxruntime", "openvino": "openvino"}[engine]
    assert importlib.util.find_spec(module), f"{module} missing: pip install -e '.[dev]'"


@dataclass
class Mlp:
    path: Path
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray

    def oracle(self, x: np.ndarray) -> list[np.ndarray]:
        """(hidden relu, softmax) in float64."""
        h = np.maximum(x.astype(np.float64) @ self.w1 + self.b1, 0)
        logits = h @ self.w2
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return [h, e / e.sum(axis=-1, keepdims=True)]


def mlp_graph(w1, b1, w2) -> Graph:
    g = Graph("mlp")
    x = g.input("x", Shape(("batch", w1.shape[0]), DType.F32))
    h = g.unary(Activation.RELU, g.binary(BinaryOp.ADD, g.matmul(x, g.constant(w1)),
                                            g.constant(b1)))
    probs = g.add_node(Softmax(axis=-1), [g.matmul(h, g.constant(w2))], name="probs")
    g.set_outputs([h, probs])
    return g


def write_mlp(path: Path, k: int = 64, hidden: int = 128, n: int = 10, seed: int = 0,
              password: str | None = None) -> Mlp:
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((k, hidden)) / np.sqrt(k)).astype(np.float32)
    b1 = rng.standard_normal(hidden).astype(np.float32) * 0.1
    w2 = (rng.standard_normal((hidden, n)) / np.sqrt(hidden)).astype(np.float32)
    write_rlx(path, RlxFile.from_baked(mlp_graph(w1, b1, w2), []), password=password)
    return Mlp(path, w1, b1, w2)


@pytest.fixture
def mlp(tmp_path) -> Mlp:
    return write_mlp(tmp_path / "mlp.rlx")


def feeds(batch: int = 3, k: int = 64, seed: int = 1) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((batch, k)).astype(np.float32)}


Oracle = Callable[[np.ndarray], list[np.ndarray]]
