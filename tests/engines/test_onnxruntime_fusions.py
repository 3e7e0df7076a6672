"""The onnxruntime fusions rlx's engine leaves off (`SLOW_FUSIONS`): a residual Add +
LayerNormalization stays two kernels in the model it saves, where onnxruntime on the
original file fuses them into SkipLayerNormalization, and computes what onnxruntime
computes on the original. A model exported with SkipLayerNormalization in it (onnxruntime's
transformer optimiser writes them) runs unfused too."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import rlx
from rlx import BakeOptions, BakeProfile, bake
from rlx.artifact import write_rlx
from rlx.engines.onnxruntime_engine import SLOW_FUSIONS
from rlx.engines.saved_models import MODEL_FILE
from rlx.onnx import import_onnx

SEQ, HIDDEN = 16, 64


def _block(folder, fused: bool):
    """x [1, SEQ, HIDDEN] -> MatMul + bias -> + x -> LayerNormalization -> y; `fused`: the
    last three as one com.microsoft SkipLayerNormalization."""
    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((HIDDEN, HIDDEN)) / 8, "b": rng.standard_normal(HIDDEN),
             "gamma": rng.uniform(0.5, 1.5, HIDDEN), "beta": rng.standard_normal(HIDDEN)}
    n = helper.make_node
    if fused:
        nodes = [n("MatMul", ["x", "w"], ["m"]),
                 n("SkipLayerNormalization", ["m", "x", "gamma", "beta", "b"], ["y"],
                   domain="com.microsoft", epsilon=1e-5)]
    else:
        nodes = [n("MatMul", ["x", "w"], ["m"]), n("Add", ["m", "b"], ["mb"]),
                 n("Add", ["mb", "x"], ["h"]),
                 n("LayerNormalization", ["h", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5)]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [numpy_helper.from_array(a.astype(np.float32), k) for k, a in inits.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    path = folder / f"block_{'fused' if fused else 'plain'}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    return path


def _kernels(model_path) -> collections.Counter:
    return collections.Counter(
        node.op_type for node in onnx.load(str(model_path), load_external_data=False).graph.node)


def test_the_fusion_is_what_onnxruntime_does_on_its_own(tmp_path):
    """Without rlx's list the plain block becomes SkipLayerNormalization: the rule is not
    vacuous for this onnxruntime."""
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(_block(tmp_path, fused=False)), so,
                         providers=["CPUExecutionProvider"])
    assert _kernels(so.optimized_model_filepath)["SkipLayerNormalization"] == 1
    assert "SkipLayerNormFusion" in SLOW_FUSIONS


@pytest.mark.parametrize("fused", [False, True])
def test_the_saved_model_runs_add_and_layer_norm(tmp_path, fused):
    path = _block(tmp_path, fused)
    file, _ = bake(*import_onnx(path), BakeOptions.from_profile(BakeProfile.EXACT))
    write_rlx(tmp_path / "block.rlx", file)
    model = rlx.load(tmp_path / "block.rlx", engine="onnxruntime", threads=1,
                     cache_dir=tmp_path / "cache")
    cached = model.runner.cached
    assert cached is not None  # the mapped prepack mode saved the optimised model
    kinds = _kernels(cached / MODEL_FILE)
    assert not kinds["SkipLayerNormalization"] and kinds["LayerNormalization"] == 1
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for seed in range(3):
        feed = {"x": np.random.default_rng(seed).standard_normal((1, SEQ, HIDDEN))
                .astype(np.float32)}
        np.testing.assert_allclose(model.run(feed)[0], reference.run(None, feed)[0],
                                   rtol=1e-4, atol=1e-4)
