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


def _two_inputs():
    from rlx.ir import DType, Graph, Shape
    from rlx.ir.ops.elementwise import Binary, BinaryOp

    g = Graph("two")
    a = g.input("a", Shape(("N", 3), DType.F32))
    b = g.input("b", Shape((1, 3), DType.F32))
    g.set_outputs([g.add_node(Binary(BinaryOp.ADD), [a, b])])
    return g


def _counting_full_checks(monkeypatch) -> list[int]:
    """The number of feed sets `FeedChecker` sent through the full `check_feeds`."""
    from rlx.runtime import feeds as module

    calls: list[int] = []
    full = module.check_feeds

    def counted(inputs, given):
        calls.append(1)
        return full(inputs, given)

    monkeypatch.setattr(module, "check_feeds", counted)
    return calls


def test_feeds_like_the_last_accepted_skip_the_full_check(monkeypatch):
    calls = _counting_full_checks(monkeypatch)
    compiled = Session().compile(_two_inputs())
    a, b = np.ones((2, 3), F), np.arange(3, dtype=F).reshape(1, 3)
    for _ in range(3):  # a symbolic dim: checked fully once, then the same shapes pass
        (got,) = compiled.run({"a": a, "b": b})
        assert np.array_equal(got, a + b)
    assert len(calls) == 1
    compiled.run({"a": np.ones((5, 3), F), "b": b})  # a new size: the full check again
    assert len(calls) == 2


@pytest.mark.parametrize("feeds,error", [
    ({"a": np.ones((2, 3)), "b": np.ones((1, 3), F)}, "the dtype must match"),
    ({"a": np.ones((2, 4), F), "b": np.ones((1, 3), F)}, "axis 1: expected 3, got 4"),
    ({"a": np.ones((2, 3), F)}, "missing input(s) 'b'"),
    ({"a": np.ones((2, 3), F), "c": np.ones((1, 3), F)}, "unknown input(s) 'c'"),
    ({"a": np.ones((2, 3), F), "b": np.ones(3, F)}, "expected rank 2, got rank 1"),
])
def test_feeds_unlike_the_accepted_still_get_the_full_check(monkeypatch, feeds, error):
    """After a pass, every difference in name, dtype, rank or size fails as before."""
    compiled = Session().compile(_two_inputs())
    compiled.run({"a": np.ones((2, 3), F), "b": np.ones((1, 3), F)})
    with pytest.raises(InputError) as raised:
        compiled.run(feeds)
    assert error in str(raised.value)


def test_converted_feeds_are_checked_every_time(monkeypatch):
    """A list (converted) or an array subclass is not the array the fast path compares."""
    calls = _counting_full_checks(monkeypatch)
    compiled = Session().compile(_two_inputs())
    b = np.ones((1, 3), F)
    for _ in range(2):
        compiled.run({"a": [[1.0, 2.0, 3.0]], "b": b})
        compiled.run({"a": np.ma.masked_array(np.ones((1, 3), F)), "b": b})
    assert len(calls) == 4
