"""fold_batchnorm: BatchNorm folded into the Conv / MatMul before it, checked against
onnxruntime running the unfolded ONNX model, plus the cases it must leave alone."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlx.frontends import import_onnx
from rlx.ir import Graph, Shape
from rlx.ir.ops.channelwise import BatchNormInference
from rlx.ir.ops.windows import Conv
from rlx.passes import eliminate_dead_code, fold_constants, specialize
from rlx.passes.batchnorm_folding import fold_batchnorm
from tests.passes.common import checked, ops_of, run

F = TensorProto.FLOAT


def _bn_params(rng, channels: int, prefix: str = "bn"):
    names = [f"{prefix}_{k}" for k in ("scale", "bias", "mean", "var")]
    values = [rng.standard_normal(channels), rng.standard_normal(channels),
              rng.standard_normal(channels), rng.uniform(0.5, 2.0, channels)]
    return names, [numpy_helper.from_array(v.astype(np.float32), n)
                   for n, v in zip(names, values)]


def _conv_bn_model(rng, bias: bool, groups: int = 1, extra_reader: bool = False):
    w = rng.standard_normal((4, 4 // groups, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "conv.weight")]
    conv_in = ["x", "conv.weight"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(4).astype(np.float32),
                                             "conv.bias"))
        conv_in.append("conv.bias")
    names, params = _bn_params(rng, 4)
    nodes = [helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1], group=groups),
             helper.make_node("BatchNormalization", ["c", *names], ["y"], epsilon=1e-3)]
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        outputs.append(helper.make_tensor_value_info("r", F, None))
    graph = helper.make_graph(nodes, "conv_bn", [helper.make_tensor_value_info(
        "x", F, [2, 4, 6, 5])], outputs, inits + params)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def _gemm_bn_model(rng, with_c: bool):
    w = rng.standard_normal((3, 5)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "fc.weight")]
    gemm_in = ["x", "fc.weight"]
    if with_c:
        inits.append(numpy_helper.from_array(rng.standard_normal(3).astype(np.float32),
                                             "fc.bias"))
        gemm_in.append("fc.bias")
    names, params = _bn_params(rng, 3)
    nodes = [helper.make_node("Gemm", gemm_in, ["g"], transB=1),
             helper.make_node("BatchNormalization", ["g", *names], ["y"])]
    graph = helper.make_graph(nodes, "gemm_bn", [helper.make_tensor_value_info(
        "x", F, [4, 5])], [helper.make_tensor_value_info("y", F, None)], inits + params)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def _folded(proto):
    graph, bindings = import_onnx(proto)
    bound, _ = specialize(graph, bindings)
    bound, _ = fold_constants(bound)  # the transposed Gemm weight becomes a Constant
    new, count = checked(fold_batchnorm, bound)
    return bound, eliminate_dead_code(new)[0], count


def _assert_matches_onnxruntime(proto, graph, feeds):
    expected = ort.InferenceSession(proto.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, want in zip(run(graph, feeds), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias,groups", [(False, 1), (True, 1), (True, 2), (False, 4)])
def test_conv_then_batchnorm_folds(bias, groups):
    rng = np.random.default_rng(0)
    proto = _conv_bn_model(rng, bias, groups)
    before, after, count = _folded(proto)
    assert count == 1
    assert "BatchNormInference" not in ops_of(after) and ops_of(after).count("Conv") == 1
    assert after.node(after.outputs[0]).name == "y"  # the BN's name moved to the Conv
    assert after.find("conv.weight") is not None  # the weight row keeps its name
    feeds = {"x": rng.standard_normal((2, 4, 6, 5)).astype(np.float32)}
    _assert_matches_onnxruntime(proto, after, feeds)


@pytest.mark.parametrize("with_c", [False, True])
def test_gemm_then_batchnorm_folds_into_the_matmul(with_c):
    rng = np.random.default_rng(1)
    proto = _gemm_bn_model(rng, with_c)
    _, after, count = _folded(proto)
    assert count == 1 and "BatchNormInference" not in ops_of(after)
    assert ops_of(after).count("MatMul") == 1 and ops_of(after).count("Binary") == 1
    _assert_matches_onnxruntime(proto, after, {"x": rng.standard_normal((4, 5)).astype(
        np.float32)})


def test_conv_with_another_reader_is_left_alone():
    rng = np.random.default_rng(2)
    _, after, count = _folded(_conv_bn_model(rng, bias=True, extra_reader=True))
    assert count == 0 and "BatchNormInference" in ops_of(after)


def test_params_not_bound_are_left_alone():
    rng = np.random.default_rng(3)
    graph, _ = import_onnx(_conv_bn_model(rng, bias=True))
    new, count = checked(fold_batchnorm, graph)  # weights are still Params
    assert count == 0 and new is graph


def test_conv_that_is_a_graph_output_is_left_alone():
    g = Graph("two_outputs")
    x = g.input("x", Shape((1, 2, 4, 4)))
    w = g.constant(np.ones((2, 2, 1, 1), np.float32))
    conv = g.add_node(Conv(), (x, w))
    params = [g.constant(np.full(2, v, np.float32)) for v in (1.0, 0.0, 0.0, 1.0)]
    bn = g.add_node(BatchNormInference(), (conv, *params))
    g.set_outputs([bn, conv])
    new, count = checked(fold_batchnorm, g)
    assert count == 0 and new is g
