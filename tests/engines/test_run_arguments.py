"""`Model.run` as onnxruntime users call it: `run(None, feeds)`, `run([names], feeds)`, a bare
array for a one-input model, `model(...)`, and `get_inputs()` / `get_outputs()` reading like
onnxruntime's NodeArgs. Oracles: onnxruntime's own session on the same graph exported as ONNX
(same call, same outputs; same names and types) and the float64 MLP oracle. Every misuse is a
one-line InputError showing the call that works, on every engine."""

from __future__ import annotations

import gc
import sys

import numpy as np
import onnxruntime as ort
import pytest

import rlx
from rlx.errors import InputError
from tests.engines.conftest import ENGINES, feeds, require

pytestmark = pytest.mark.parametrize("engine", ENGINES)


def _ort(mlp) -> ort.InferenceSession:
    """onnxruntime on the same file's graph, exported: the reference for the spellings."""
    proto = rlx.export_onnx(rlx.read_rlx(mlp.path))
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


def _same(got, want, tol=2e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_onnxruntime_s_argument_order(engine, mlp):
    require(engine)
    model, session = rlx.load(mlp.path, engine=engine), _ort(mlp)
    x = feeds()
    hidden, probs = [o.name for o in session.get_outputs()]
    _same(model.run(None, x), session.run(None, x))
    _same(model.run([probs], x), session.run([probs], x))
    _same(model.run((probs, hidden), x), session.run([probs, hidden], x))
    for got, want in zip(model.run(None, x), mlp.oracle(x["x"])):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_a_bare_array_and_calling_the_model(engine, mlp):
    require(engine)
    model, session = rlx.load(mlp.path, engine=engine), _ort(mlp)
    x = feeds()
    want = session.run(None, x)
    _same(model.run(x["x"]), want)
    _same(model(x["x"]), want)
    _same(model(x), want)
    _same(model(None, x["x"]), want)
    _same(model(x["x"], ["probs"]), want[1:])
    _same(model.run(x, "probs"), want[1:])


def _calls(run) -> int:
    """Python and C function calls one `run()` makes (a count, not a clock)."""
    count = [0]

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            count[0] += 1

    run()  # warm: first-run allocations and plans
    gc.collect()  # a collection inside the counted run would call finalizers: not its cost
    gc.disable()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
        gc.enable()
    return count[0]


def test_onnxruntime_s_call_costs_what_the_everyday_call_costs(engine, mlp):
    require(engine)
    model, x = rlx.load(mlp.path, engine=engine), feeds()
    everyday = _calls(lambda: model.run(x))
    assert _calls(lambda: model.run(None, x)) == _calls(lambda: model(x)) == everyday


def test_get_inputs_and_outputs_read_like_onnxruntime_s(engine, mlp):
    require(engine)
    model, session = rlx.load(mlp.path, engine=engine), _ort(mlp)
    for ours, theirs in ((model.get_inputs(), session.get_inputs()),
                         (model.get_outputs(), session.get_outputs())):
        assert [(a.name, a.type) for a in ours] == [(a.name, a.type) for a in theirs]
        assert [len(a.shape) for a in ours] == [len(a.shape) for a in theirs]
    assert model.get_inputs()[0].shape == ("batch", 64) == tuple(session.get_inputs()[0].shape)
    assert model.get_inputs() == model.inputs and model.get_inputs() is not model.inputs


def test_every_dtype_is_spelled_as_onnxruntime_spells_it(engine):
    """The ONNX type names onnxruntime gives NodeArg.type, per numpy dtype."""
    from rlx.engines.model import IoSpec

    spelled = {np.float32: "tensor(float)", np.float64: "tensor(double)",
               np.float16: "tensor(float16)", np.int64: "tensor(int64)",
               np.int32: "tensor(int32)", np.int8: "tensor(int8)", np.uint8: "tensor(uint8)",
               np.bool_: "tensor(bool)"}
    for dtype, name in spelled.items():
        assert IoSpec("x", (1,), np.dtype(dtype)).type == name


MISUSES = [
    (lambda m, x: m.run(None), "no feeds given: model.run({'x': ...})"),
    (lambda m, x: m.run([x["x"]]), "feeds must be a dict of input name -> array, got list: "
                                   "model.run({'x': ...})"),
    (lambda m, x: m.run(x, 3), "outputs must be output names or None, got int: "
                               "model.run({...}, ["),
    (lambda m, x: m.run(x, x), "outputs must be output names or None, got dict"),
    (lambda m, x: m.run(None, [1.0, 2.0]), "feeds must be a dict of input name -> array, got list"),
]


@pytest.mark.parametrize(("misuse", "message"), MISUSES)
def test_misuse_is_one_line_and_shows_the_right_call(engine, mlp, misuse, message):
    require(engine)
    model = rlx.load(mlp.path, engine=engine)
    with pytest.raises(InputError) as error:
        misuse(model, feeds())
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_bare_array_for_several_inputs_names_them(engine, tmp_path):
    require(engine)
    from rlx.artifact import RlxFile, write_rlx
    from rlx.ir import DType, Graph, Shape
    from rlx.ir.ops.elementwise import BinaryOp

    g = Graph("two")
    a, b = (g.input(n, Shape((2,), DType.F32)) for n in ("a", "b"))
    g.set_outputs([g.binary(BinaryOp.ADD, a, b)])
    write_rlx(tmp_path / "two.rlx", RlxFile.from_baked(g, []))
    model = rlx.load(tmp_path / "two.rlx", engine=engine)
    with pytest.raises(InputError) as error:
        model.run(np.ones(2, np.float32))
    assert str(error.value) == ("a bare array feeds a single input, and there are 2: "
                                "model.run({'a': ..., 'b': ...})")
    one = np.ones(2, np.float32)
    np.testing.assert_array_equal(model(None, {"a": one, "b": one})[0], one + one)
