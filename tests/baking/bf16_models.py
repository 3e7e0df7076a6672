"""A model bf16 cannot run everywhere, for the fast plan's bf16 tests, written with
onnx.helper so onnxruntime runs the original as the independent f32 reference.

`offset_mlp`: x [8, 64] -> MatMul + Add (bias 512 + b) -> Relu -> Add (-512) -> MatMul +
Add ("logits", 10 classes). The first layer's result carries an offset of 512 that the Add
after the Relu (a no-op there: everything is > 0) takes away: exact in f32 (spacing 6e-5 at
512), but stored as bf16 (spacing 4 at 512) the first layer's signal (~1) is gone. Unless
the offset is never stored: OpenVINO fuses the bias, the Relu and the Add into the product
(f32 post-ops), so only with `stored` (a Reshape between the Relu and the Add: no post-op
reaches past it) does bf16 lose the signal, and the guard must keep that layer f32 (the
last may run bf16).

`region_cnn`: x [1, 3, 32, 32] -> Conv -> Relu -> MaxPool -> Conv -> Relu, Concat with the
pooled map -> Reshape -> MatMul + Add ("logits"): the cheap ops between its three products
are the bf16 region a plan with all three bf16 runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

__all__ = ["offset_mlp", "region_cnn", "OFFSET"]

OFFSET = 512.0


def offset_mlp(folder: Path, seed: int = 0, stored: bool = False) -> Path:
    rng = np.random.default_rng(seed)
    inits = {"w0": (rng.standard_normal((64, 128)) * (2 / 64) ** 0.5).astype(np.float32),
             "b0": (rng.standard_normal(128) * 0.1 + OFFSET).astype(np.float32),
             "minus": np.full(128, -OFFSET, np.float32),
             "w1": (rng.standard_normal((128, 10)) * (2 / 128) ** 0.5).astype(np.float32),
             "b1": (rng.standard_normal(10) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["m0"]),
             helper.make_node("Add", ["m0", "b0"], ["a0"]),
             helper.make_node("Relu", ["a0"], ["r0"]),
             helper.make_node("Add", ["r0", "minus"], ["h0"]),
             helper.make_node("MatMul", ["h0", "w1"], ["m1"]),
             helper.make_node("Add", ["m1", "b1"], ["logits"])]
    if stored:
        inits["minus"] = inits["minus"].reshape(2, 64)
        inits["split"], inits["join"] = np.array([8, 2, 64]), np.array([8, 128])
        nodes[3:4] = [helper.make_node("Reshape", ["r0", "split"], ["r0s"]),
                      helper.make_node("Add", ["r0s", "minus"], ["h0s"]),
                      helper.make_node("Reshape", ["h0s", "join"], ["h0"])]
    graph = helper.make_graph(
        nodes, "offset_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    path = folder / ("offset_mlp_stored.onnx" if stored else "offset_mlp.onnx")
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def region_cnn(folder: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    inits = {"w0": (rng.standard_normal((8, 3, 3, 3)) * 0.4).astype(np.float32),
             "b0": (rng.standard_normal(8) * 0.1).astype(np.float32),
             "w1": (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32),
             "b1": (rng.standard_normal(16) * 0.1).astype(np.float32),
             "flat": np.array([1, 24 * 16 * 16]),
             "w2": (rng.standard_normal((24 * 16 * 16, 10)) * 0.03).astype(np.float32),
             "b2": (rng.standard_normal(10) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Concat", ["p0", "r1"], ["cat"], axis=1),
             helper.make_node("Reshape", ["cat", "flat"], ["f"]),
             helper.make_node("MatMul", ["f", "w2"], ["m2"]),
             helper.make_node("Add", ["m2", "b2"], ["logits"])]
    graph = helper.make_graph(
        nodes, "region_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    path = folder / "region_cnn.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path
