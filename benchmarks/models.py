"""The benchmarked models, prepared once per run: the ONNX file that onnxruntime and
onnx.reference load, what rlx bakes (the same file, or the demo MLP built in code), seeded
inputs shared by every runtime, and the model's weights as rows for the quantisers.

The real models are those of ../shared/MODELS.md, fetched by tests/real_models.py; their
seeded inputs are the ones tests/test_real_models.py checks against onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.probes import MLP_SOURCE

MODEL_NAMES = ("mlp", "minilm-l3", "ppocr-cls", "silero-vad", "nudenet-320n", "captcha-crnn",
               "orientation-lcnet")  # the demo MLP and the six of MODELS.md
QUANT_ROW = 256  # a multiple of both block sizes (Q8_0: 32, TQ2_0: 256)


@dataclass(frozen=True)
class BenchModel:
    name: str
    onnx: Path  # what onnxruntime and onnx.reference run
    source: str  # what rlx imports and bakes: an ONNX path, or MLP_SOURCE
    feeds: Path  # .npz of seeded inputs, the same for every runtime
    weight_bytes: int  # bytes of every weight tensor, the yardstick for memory growth
    weight_rows: np.ndarray  # float32 weights of rank >= 2, as [n, QUANT_ROW] rows


def mlp_onnx(path: Path) -> Path:
    """The demo MLP of rlx.models (same weights, same shapes) as an ONNX file."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from rlx.models import BATCH, IN, OUT, mlp_weights

    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]),
             helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["h"]),
             helper.make_node("MatMul", ["h", "w2"], ["m2"]),
             helper.make_node("Add", ["m2", "b2"], ["logits"])]
    graph = helper.make_graph(
        nodes, "mnist_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, IN])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, OUT])],
        [numpy_helper.from_array(w, name) for name, w in mlp_weights().items()])
    # IR 10 / opset 18: well inside what onnxruntime and onnx.reference both accept.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              ir_version=10)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _mlp_feeds() -> dict[str, np.ndarray]:
    from rlx.models import BATCH, IN

    return {"x": np.random.default_rng(0).standard_normal((BATCH, IN), np.float32)}


def _feed_makers() -> dict[str, Callable[[], dict[str, np.ndarray]]]:
    from tests.real_models import FEEDS

    return {"mlp": _mlp_feeds, **FEEDS}


def _tensors(graph) -> Iterator[np.ndarray]:
    """Every initializer and Constant value of an ONNX graph and of its subgraphs."""
    from onnx import AttributeProto, numpy_helper

    yield from (numpy_helper.to_array(t) for t in graph.initializer)
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Constant" and attr.name == "value":
                yield numpy_helper.to_array(attr.t)
            elif attr.type == AttributeProto.GRAPH:
                yield from _tensors(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _tensors(sub)


def weight_rows(tensors: list[np.ndarray]) -> np.ndarray:
    """The float32 tensors of rank >= 2 (matmul, conv, recurrent and embedding weights),
    concatenated and cut to whole [QUANT_ROW] rows; empty when there are too few values."""
    flat = [t.ravel() for t in tensors if t.dtype == np.float32 and t.ndim >= 2]
    values = np.concatenate(flat) if flat else np.zeros(0, np.float32)
    return values[:len(values) // QUANT_ROW * QUANT_ROW].reshape(-1, QUANT_ROW)


def prepare(name: str, work: Path) -> BenchModel:
    """Fetch or build `name`'s ONNX file and write its feeds under `work`."""
    import onnx

    from tests.real_models import fetch

    work.mkdir(parents=True, exist_ok=True)
    path = mlp_onnx(work / "mlp.onnx") if name == "mlp" else fetch(name)
    feeds = work / f"{name}-feeds.npz"
    np.savez(feeds, **_feed_makers()[name]())
    tensors = list(_tensors(onnx.load(path).graph))
    return BenchModel(name=name, onnx=path, source=MLP_SOURCE if name == "mlp" else str(path),
                      feeds=feeds, weight_bytes=sum(t.nbytes for t in tensors),
                      weight_rows=weight_rows(tensors))
