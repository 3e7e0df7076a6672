"""Inputs too small for a Pad's reflection or a Conv's kernel fail at that node, as
onnxruntime refuses them, rather than running on numpy's own edge rules or failing later."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from rlx.errors import KernelError
from rlx.onnx import import_onnx
from rlx.runtime import Session


def _model(node, constant):
    """`node` reading x [1, 1, length] and `constant`, made by a Constant node (no weights
    to bind)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "length"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    make = helper.make_node("Constant", [], [constant.name], value=constant)
    graph = helper.make_graph([make, node], "small", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _refused_by_both(model, x: np.ndarray, match: str) -> None:
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own error type
        ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    graph, _ = import_onnx(model)
    with pytest.raises(KernelError, match=match):
        Session().compile(graph).run({"x": x})


def test_a_reflection_longer_than_its_axis_fails_at_the_pad():
    pads = helper.make_tensor("pads", TensorProto.INT64, [6], [0, 0, 4, 0, 0, 4])
    model = _model(helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect"), pads)
    _refused_by_both(model, np.zeros((1, 1, 4), np.float32), r"\(Pad\).*reflect pads")
    graph, _ = import_onnx(model)
    x = np.arange(5, dtype=np.float32).reshape(1, 1, 5)  # pads under the length still run
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(Session().compile(graph).run({"x": x})[0], want)


def test_an_input_shorter_than_the_kernel_fails_at_the_conv():
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 1, 8], np.ones(16, np.float32))
    model = _model(helper.make_node("Conv", ["x", "w"], ["y"], strides=[4]), w)
    _refused_by_both(model, np.zeros((1, 1, 6), np.float32), r"\(Conv\).*too small")
