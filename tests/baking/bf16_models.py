"""A model bf16 cannot run everywhere, for the fast plan's bf16 tests, written with
onnx.helper so onnxruntime runs the original as the independent f32 reference.

`offset_mlp`: x [8, 64] -> MatMul + Add (bias 512 + b) -> Relu -> Add (-512) -> MatMul +
Add ("logits", 10 classes). The first layer's result carries an offset of 512 that the Add
after the Relu (a no-op there: everything is > 0) takes away: exact in f32 (spacing 6e-5 at
512), but stored as bf16 (spacing 4 at 512) the first layer's signal (~1) is gone. The
guard must keep that layer f32; the last layer may run bf16."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

__all__ = ["offset_mlp", "OFFSET"]

OFFSET = 512.0


def offset_mlp(folder: Path, seed: int = 0) -> Path:
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
    graph = helper.make_graph(
        nodes, "offset_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    path = folder / "offset_mlp.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path
