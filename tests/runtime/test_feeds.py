"""Feeds as onnxruntime takes them: `conform_feed` accepts what onnxruntime accepts (the
oracle, run on the same one-input model) and refuses the rest with a clear InputError."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from rlx.errors import InputError
from rlx.onnx import import_onnx
from rlx.runtime import Session, conform_feed

F = np.float32


def _model(declared):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, declared)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _accepts_ort(model, value) -> bool:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    try:
        session.run(None, {"a": value})
    except Exception:  # onnxruntime raises its own error kinds
        return False
    return True


CASES = [  # declared shape, fed value: both accepted or both refused
    ([], np.ones(1, F)), ([], np.ones((1, 1), F)), ([], np.array(1, F)),
    ([1], np.array(1, F)), (["N"], np.array(1, F)), ([1, 3], np.ones(3, F)),
    ([3], np.ones((1, 3), F)), ([2, 3], np.ones((2, 4), F)), ([2, 3], np.ones((2, 3))),
    ([2, 3], np.ones((2, 3), np.float16)), (["N", 3], np.ones((0, 3), F)),
    ([2, 3], np.ones((3, 2), F).T), ([2], [1.0, 2.0]),
]


@pytest.mark.parametrize("declared,value", CASES)
def test_same_verdict_as_onnxruntime(declared, value):
    model = _model(declared)
    compiled = Session().compile(import_onnx(model)[0])
    try:
        (got,) = compiled.run({"a": value})
        ours = True
    except InputError as err:
        assert "input 'a': expected" in str(err) and "\n" not in str(err)
        ours = False
    assert ours == _accepts_ort(model, value)
    if ours:
        assert np.array_equal(got, np.asarray(value, F).reshape(got.shape))


def test_one_element_for_a_scalar_is_a_view_not_a_copy():
    from rlx.ir import DType, Shape

    value = np.array([16000], np.int64)
    taken = conform_feed("sr", Shape((), DType.I64), value)
    assert taken.shape == () and np.shares_memory(taken, value)


def test_documented_differences_from_onnxruntime():
    """onnxruntime takes any shape for a declared scalar and does not check that a named
    dim has one size across inputs; rlx's graph was built on both, so they are errors."""
    from rlx.ir import DType, Shape

    with pytest.raises(InputError, match="a scalar takes one element"):
        conform_feed("a", Shape((), DType.F32), np.ones(2, F))
    bound: dict[str, int] = {}
    conform_feed("a", Shape(("N",), DType.F32), np.ones(2, F), bound)
    with pytest.raises(InputError, match="dim 'N' is 2 elsewhere"):
        conform_feed("b", Shape(("N",), DType.F32), np.ones(3, F), bound)
    assert _accepts_ort(_model([]), np.ones(2, F))


def test_silero_vad_takes_its_own_example_feed():
    """silero-vad's examples pass sr as int64 [1] for the declared scalar."""
    from tests.real_models import fetch, import_kwargs, silero_feeds

    path = fetch("silero-vad")
    compiled = Session().compile(import_onnx(path, **import_kwargs(path))[0])
    feeds = silero_feeds(0)
    feeds["sr"] = np.array([16000], np.int64)
    oracle = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for got, want in zip(compiled.run(feeds), oracle.run(None, feeds)):
        assert np.max(np.abs(got - want)) <= 1e-4
