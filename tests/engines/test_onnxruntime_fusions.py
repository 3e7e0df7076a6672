"""What rlx's onnxruntime engine changes in onnxruntime's fusions, checked on the model it
saves. Left off (`SLOW_FUSIONS`): a residual Add + LayerNormalization stays two kernels,
where onnxruntime on the original file fuses them into SkipLayerNormalization, and computes
what onnxruntime computes on the original; a model exported with SkipLayerNormalization in
it (onnxruntime's transformer optimiser writes them) runs unfused too. Added
(`rlx.onnx.ort_fusions`): a fast file's int8 MatMuls take their bias Adds."""

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
from tests.baking.attention_models import encoder_block, token_feeds

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


def test_int8_matmuls_take_their_bias(tmp_path):
    """An encoder block's fast file: every int8 projection is one MatMulIntegerToFloat with
    its bias, the only Adds left are the two residuals; held out, the outputs keep cosine
    >= 0.999 against onnxruntime on the original."""
    path = encoder_block(tmp_path)
    file, report = bake(*import_onnx(path), BakeOptions.from_profile("fast").replace(
        calibration=token_feeds(1, 4)))
    write_rlx(tmp_path / "block.rlx", file)
    model = rlx.load(tmp_path / "block.rlx", engine="onnxruntime", precision="fast",
                     cache_dir=tmp_path / "cache")
    saved = onnx.load(str(model.runner.cached / MODEL_FILE), load_external_data=False)
    fused = [n for n in saved.graph.node if n.op_type == "MatMulIntegerToFloat"]
    assert len(fused) == report.precision.counts["int8"] >= 4
    assert all(len(n.input) == 7 and n.input[6] for n in fused)
    assert _kernels(model.runner.cached / MODEL_FILE)["Add"] == 2
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for feed in token_feeds(90, 3):
        want, got = reference.run(None, feed)[0].ravel(), model.run(feed)[0].ravel()
        assert want @ got / np.linalg.norm(want) / np.linalg.norm(got) >= 0.999
