"""fold_channel_scales: a per-channel Mul and Add after a Conv (a BatchNorm as exporters
often write it) folded into the Conv, checked against onnxruntime running the unfolded
ONNX model, plus the cases it must leave alone."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlx.frontends import import_onnx
from rlx.passes import eliminate_dead_code, fold_constants, specialize
from rlx.passes.channel_scale_folding import fold_channel_scales
from tests.passes.common import checked, ops_of, run

F = TensorProto.FLOAT


def _model(rng, scale_shape, shift_shape, bias: bool, extra_reader: bool = False):
    """x [2, 3, 6, 5] -> Conv 4 (3x3) -> Mul(scale) -> Add(shift) -> Relu ("y")."""
    inits = {"w": rng.standard_normal((4, 3, 3, 3)), "b": rng.standard_normal(4),
             "s": rng.uniform(0.5, 2, scale_shape), "t": rng.standard_normal(shift_shape)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["c"],
                              pads=[1] * 4),
             helper.make_node("Mul", ["s", "c"], ["m"]),  # the constant first: either side
             helper.make_node("Add", ["m", "t"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("c", F, None))
    graph = helper.make_graph(
        nodes, "conv_mul_add", [helper.make_tensor_value_info("x", F, [2, 3, 6, 5])], outputs,
        [numpy_helper.from_array(v.astype(np.float32), n) for n, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _folded(proto):
    graph, bindings = import_onnx(proto)
    bound, _ = specialize(graph, bindings)
    bound, _ = fold_constants(bound)
    new, count = checked(fold_channel_scales, bound)
    return eliminate_dead_code(new)[0], count


def _assert_matches_onnxruntime(proto, graph, seed: int):
    feeds = {"x": np.random.default_rng(seed).standard_normal((2, 3, 6, 5)).astype(
        np.float32)}
    expected = ort.InferenceSession(proto.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, want in zip(run(graph, feeds), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scale_shape, shift_shape, bias", [
    ((4, 1, 1), (4, 1, 1), True), ((1, 4, 1, 1), (4, 1, 1), False), ((1,), (4, 1, 1), True)])
def test_a_per_channel_mul_and_add_fold_into_the_conv(scale_shape, shift_shape, bias):
    proto = _model(np.random.default_rng(0), scale_shape, shift_shape, bias)
    after, count = _folded(proto)
    assert count == 1 and ops_of(after).count("Binary") == 0  # Mul and Add are gone
    conv = next(n for n in after.nodes() if type(n.op).__name__ == "Conv")
    assert len(conv.inputs) == 3  # the shift is its bias now
    _assert_matches_onnxruntime(proto, after, seed=1)


def test_a_scale_that_varies_over_space_stops_the_fold_but_the_shift_after_it_stays():
    proto = _model(np.random.default_rng(2), (1, 1, 6, 5), (4, 1, 1), True)
    after, count = _folded(proto)
    assert count == 0 and ops_of(after).count("Binary") == 2
    _assert_matches_onnxruntime(proto, after, seed=3)


def test_a_conv_read_elsewhere_is_left_alone():
    proto = _model(np.random.default_rng(4), (4, 1, 1), (4, 1, 1), True, extra_reader=True)
    after, count = _folded(proto)
    assert count == 0 and ops_of(after).count("Binary") == 2
