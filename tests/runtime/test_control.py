"""If, Loop, Scan, LSTM, GRU and RNN against ONNX's reference evaluator and onnxruntime.

Our control-flow graphs pass outer values to subgraphs explicitly; the equivalent ONNX
models (built here with onnx.helper) let their branches capture them implicitly.
onnxruntime is the oracle for what the reference evaluator lacks (sequence_lens,
activations, clip, input_forget, Scan axes); it refuses layout=1, which the reference has.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rlx.errors import GraphError, ShapeError
from rlx.ir import UNKNOWN, DType, Graph, Shape, graph_from_json, graph_to_json, verify
from rlx.ir.ops.control import GRU, LSTM, RNN, If, Loop, RnnDirection, Scan
from rlx.ir.ops.elementwise import BinaryOp, Cast, Identity
from rlx.ir.ops.logic import Compare, CompareOp
from rlx.runtime import Session
from tests.support import onnx_reference, run_op

RNG = np.random.default_rng(20240612)
F32 = DType.F32


def _info(name: str, value: np.ndarray | None = None, dtype=TensorProto.FLOAT, shape=None):
    if value is not None:
        dtype, shape = helper.np_dtype_to_tensor_dtype(value.dtype), value.shape
    return helper.make_tensor_value_info(name, dtype, shape)


def _onnx_model(nodes, inputs: dict[str, np.ndarray], outputs: list[str], opset: int):
    graph = helper.make_graph(nodes, "g", [_info(n, v) for n, v in inputs.items()],
                              [_info(o) for o in outputs])  # all float32 here
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # what this onnxruntime reads
    return model


def _ort(nodes, inputs: dict[str, np.ndarray], outputs: list[str], opset: int = 16):
    model = _onnx_model(nodes, inputs, outputs, opset)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def _reference_model(nodes, inputs: dict[str, np.ndarray], outputs: list[str],
                     opset: int = 16) -> list[np.ndarray]:
    model = _onnx_model(nodes, inputs, outputs, opset)
    return list(ReferenceEvaluator(model).run(None, inputs))


def _run(g: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Verify, run, and check every output against its declared shape and dtype."""
    verify(g)
    outs = Session().compile(g).run(feeds)
    for o, value in zip(g.outputs, outs):
        declared = g.node(o).shape
        assert value.dtype == declared.dtype.numpy and value.ndim == declared.rank
        assert all(isinstance(d, str) or d == s for d, s in zip(declared.dims, value.shape))
    return outs


def _close(ours, theirs, tol: float = 1e-5) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# -- If ------------------------------------------------------------------------------------
def _branch(name: str, op: BinaryOp, x: Shape, y: Shape) -> Graph:
    g = Graph(name)
    a, b = g.input("a", x), g.input("b", y)
    g.set_outputs([g.binary(op, a, b), g.add_node(Identity(), [a])])
    return g


def _if_graph(then: Graph, other: Graph, x: Shape, y: Shape) -> Graph:
    g = Graph("outer")
    cond = g.input("cond", Shape((), DType.BOOL))
    xi, yi = g.input("x", x), g.input("y", y)
    node = g.add_node(If(then, other), [cond, xi, yi])
    g.set_outputs(g.unpack(node))
    return g


def _onnx_if(cond: bool, x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    def branch(name, op_type):
        return helper.make_graph(
            [helper.make_node(op_type, ["x", "y"], [f"{name}_r"]),
             helper.make_node("Identity", ["x"], [f"{name}_x"])],
            name, [], [_info(f"{name}_r", dtype=TensorProto.FLOAT, shape=None),
                       _info(f"{name}_x", dtype=TensorProto.FLOAT, shape=None)])

    node = helper.make_node("If", ["cond"], ["r", "rx"], then_branch=branch("then", "Add"),
                            else_branch=branch("else", "Mul"))
    return _reference_model([node], {"cond": np.array(cond), "x": x, "y": y}, ["r", "rx"])


@pytest.mark.parametrize("cond", [True, False])
def test_if_matches_onnx(cond):
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    y = RNG.standard_normal((3,)).astype(np.float32)
    sx, sy = Shape(x.shape), Shape(y.shape)
    g = _if_graph(_branch("then", BinaryOp.ADD, sx, sy), _branch("else", BinaryOp.MUL, sx, sy),
                  sx, sy)
    ours = _run(g, {"cond": np.array(cond), "x": x, "y": y})
    _close(ours, _onnx_if(cond, x, y))


def test_if_binds_symbolic_dims_and_unknowns_where_branches_differ():
    then = Graph("then")
    a, b = then.input("a", Shape(("n",))), then.input("b", Shape(("m",)))
    then.set_outputs([a, then.binary(BinaryOp.ADD, a, a)])
    other = Graph("else")
    a, b = other.input("a", Shape(("n",))), other.input("b", Shape(("m",)))
    other.set_outputs([b, other.binary(BinaryOp.MUL, a, a)])
    g = _if_graph(then, other, Shape(("batch",)), Shape((4,)))
    first, second = (g.node(o).shape for o in g.outputs)
    assert first == Shape((UNKNOWN,)) and second == Shape(("batch",))
    x, y = np.arange(3, dtype=np.float32), np.ones(4, np.float32)
    out_then = _run(g, {"cond": np.array(True), "x": x, "y": y})
    out_else = _run(g, {"cond": np.array(False), "x": x, "y": y})
    _close(out_then, [x, 2 * x])
    _close(out_else, [y, x * x])


def test_if_accepts_one_element_cond_and_branch_constants():
    then, other = Graph("then"), Graph("else")
    then.set_outputs([then.constant(np.float32([1, 2]))])
    other.set_outputs([other.constant(np.float32([3, 4]))])
    g = Graph("outer")
    cond = g.input("cond", Shape((1,), DType.BOOL))
    g.set_outputs(g.unpack(g.add_node(If(then, other), [cond])))
    _close(_run(g, {"cond": np.array([False])}), [np.float32([3, 4])])


_VECTOR = Shape((3,))


def _one_output(name: str, n_outputs: int, shape: Shape = _VECTOR) -> Graph:
    g = Graph(name)
    a = g.input("a", shape)
    g.set_outputs([g.add_node(Identity(), [a]) for _ in range(n_outputs)])
    return g


def test_if_shape_errors():
    g = Graph("outer")
    cond = g.input("cond", Shape((), DType.BOOL))
    x = g.input("x", Shape((3,)))
    with pytest.raises(ShapeError, match="then_branch has 2 outputs, else_branch has 1"):
        g.add_node(If(_one_output("t", 2), _one_output("e", 1)), [cond, x])
    with pytest.raises(ShapeError, match="cond must be a one-element bool"):
        g.add_node(If(_one_output("t", 1), _one_output("e", 1)), [x, x])
    with pytest.raises(ShapeError, match="then_branch takes 1 inputs, the op passes 2"):
        g.add_node(If(_one_output("t", 1), _one_output("e", 1)), [cond, x, x])
    with pytest.raises(ShapeError, match="input 'a' is f32\\[4\\], the op passes f32\\[3\\]"):
        g.add_node(If(_one_output("t", 1, Shape((4,))), _one_output("e", 1)), [cond, x])
    matrix = Graph("matrix")
    matrix.input("a", Shape((3,)))
    matrix.set_outputs([matrix.constant(np.zeros((1, 3), np.float32))])
    with pytest.raises(ShapeError, match="output 0 is f32\\[3\\] and f32\\[1, 3\\].*fix "
                                         "them \\(input_shapes=, --input-shapes\\)"):
        g.add_node(If(_one_output("t", 1, Shape(("n",))), matrix), [cond, x])


# -- Loop ----------------------------------------------------------------------------------
def _running_sum_body(limit: int) -> Graph:
    """s += x * i; a scan output of s; continue while i < limit."""
    body = Graph("body")
    i = body.input("i", Shape((), DType.I64))
    body.input("cond", Shape((), DType.BOOL))
    s, x = body.input("s", Shape((3,))), body.input("x", Shape((3,)))
    step = body.binary(BinaryOp.MUL, x, body.add_node(Cast(F32), [i]))
    s_out = body.binary(BinaryOp.ADD, s, step)
    cond = body.add_node(Compare(CompareOp.LT), [i, body.constant(np.int64(limit))])
    body.set_outputs([cond, s_out, body.add_node(Identity(), [s_out])])
    return body


def _onnx_running_sum_loop(trips: int | None, limit: int, s0, x) -> list[np.ndarray]:
    limit_node = helper.make_node("Constant", [], ["limit"],
                                  value=helper.make_tensor("lim", TensorProto.INT64, [], [limit]))
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "i_f"], ["step"]),
         helper.make_node("Add", ["s", "step"], ["s_out"]),
         limit_node,
         helper.make_node("Less", ["i", "limit"], ["cond_out"]),
         helper.make_node("Identity", ["s_out"], ["scan"])],
        "body",
        [_info("i", dtype=TensorProto.INT64, shape=[]), _info("c", dtype=TensorProto.BOOL,
                                                              shape=[]),
         _info("s", dtype=TensorProto.FLOAT, shape=[3])],
        [_info("cond_out", dtype=TensorProto.BOOL, shape=[]),
         _info("s_out", dtype=TensorProto.FLOAT, shape=[3]),
         _info("scan", dtype=TensorProto.FLOAT, shape=[3])])
    inputs = {"s0": s0, "x": x, "cond": np.array(True)}
    if trips is not None:
        inputs["M"] = np.array(trips, np.int64)
    node = helper.make_node("Loop", ["M" if trips is not None else "", "cond", "s0"],
                            ["s_final", "scans"], body=body)
    return _ort([node], inputs, ["s_final", "scans"])


@pytest.mark.parametrize("trips,limit", [(4, 100), (None, 5), (3, 1)])
def test_loop_running_sum_and_scan_output(trips, limit):
    s0 = RNG.standard_normal(3).astype(np.float32)
    x = RNG.standard_normal(3).astype(np.float32)
    g = Graph("outer")
    # the importer's stand-in for an omitted max_trip is a huge constant
    m = g.constant(np.int64(trips if trips is not None else np.iinfo(np.int64).max))
    cond = g.constant(np.bool_(True))
    si, xi = g.input("s0", Shape((3,))), g.input("x", Shape((3,)))
    node = g.add_node(Loop(_running_sum_body(limit), n_carried=1), [m, cond, si, xi])
    g.set_outputs(g.unpack(node))
    assert g.node(node).shape == (Shape((3,)), Shape((UNKNOWN, 3)))
    _close(_run(g, {"s0": s0, "x": x}), _onnx_running_sum_loop(trips, limit, s0, x))


def test_loop_with_zero_trips_returns_inputs_and_empty_scans():
    g = Graph("outer")
    m = g.input("m", Shape((), DType.I64))
    cond = g.input("cond", Shape((), DType.BOOL))
    si, xi = g.input("s0", Shape((3,))), g.input("x", Shape((3,)))
    g.set_outputs(g.unpack(g.add_node(Loop(_running_sum_body(9), 1), [m, cond, si, xi])))
    s0 = np.float32([1, 2, 3])
    for trips, go in [(0, True), (5, False)]:
        final, scans = _run(g, {"m": np.int64(trips), "cond": np.array(go), "s0": s0,
                                "x": s0})
        _close([final], [s0])
        assert scans.shape == (0, 3) and scans.dtype == np.float32


def test_loop_shape_errors():
    g = Graph("outer")
    m, cond = g.constant(np.int64(3)), g.constant(np.bool_(True))
    s = g.input("s", Shape((3,)))
    with pytest.raises(ShapeError, match="max_trip must be a one-element i64"):
        g.add_node(Loop(_running_sum_body(3), 1), [cond, cond, s, s])
    with pytest.raises(ShapeError, match="body takes 4 inputs, the op passes 3"):
        g.add_node(Loop(_running_sum_body(3), 1), [m, cond, s])
    with pytest.raises(ShapeError, match="n_carried 3 does not fit"):
        g.add_node(Loop(_running_sum_body(3), 3), [m, cond, s, s])
    body = Graph("body")
    body.input("i", Shape((), DType.I64))
    body.input("c", Shape((), DType.BOOL))
    t = body.input("t", Shape((3,)))
    body.set_outputs([t, t])
    with pytest.raises(ShapeError, match="body cond output must be a one-element bool"):
        g.add_node(Loop(body, 1), [m, cond, s])


# -- Scan ----------------------------------------------------------------------------------
def _scan_body(slice_shape: Shape) -> Graph:
    """state += slice; scan output = 2 * state."""
    body = Graph("body")
    s, x = body.input("s", slice_shape), body.input("x", slice_shape)
    s_out = body.binary(BinaryOp.ADD, s, x)
    body.set_outputs([s_out, body.binary(BinaryOp.MUL, s_out, body.constant(np.float32(2)))])
    return body


def _onnx_scan(s0, xs, **attrs) -> list[np.ndarray]:
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s_out"]),
         helper.make_node("Constant", [], ["two"],
                          value=helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])),
         helper.make_node("Mul", ["s_out", "two"], ["y"])],
        "body", [_info("s", dtype=TensorProto.FLOAT, shape=list(s0.shape)),
                 _info("x", dtype=TensorProto.FLOAT, shape=list(s0.shape))],
        [_info("s_out", dtype=TensorProto.FLOAT, shape=list(s0.shape)),
         _info("y", dtype=TensorProto.FLOAT, shape=list(s0.shape))])
    node = helper.make_node("Scan", ["s0", "xs"], ["s_final", "ys"], body=body,
                            num_scan_inputs=1, **attrs)
    return _ort([node], {"s0": s0, "xs": xs}, ["s_final", "ys"])


@pytest.mark.parametrize("in_axis,in_dir,out_axis,out_dir", [
    (0, 0, 0, 0), (1, 1, 0, 0), (-1, 0, -1, 1), (0, 1, 1, 1),
])
def test_scan_matches_onnxruntime(in_axis, in_dir, out_axis, out_dir):
    s0 = RNG.standard_normal((2,)).astype(np.float32)
    xs = RNG.standard_normal((5, 2) if in_axis == 0 else (2, 5)).astype(np.float32)
    g = Graph("outer")
    si, xi = g.input("s0", Shape(s0.shape)), g.input("xs", Shape(xs.shape))
    op = Scan(_scan_body(Shape((2,))), 1, (in_axis,), (in_dir,), (out_axis,), (out_dir,))
    node = g.add_node(op, [si, xi])
    g.set_outputs(g.unpack(node))
    theirs = _onnx_scan(s0, xs, scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                        scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    _close(_run(g, {"s0": s0, "xs": xs}), theirs)


def test_scan_shapes_and_errors():
    g = Graph("outer")
    s = g.input("s", Shape((2,)))
    a, b = g.input("a", Shape(("t", 2))), g.input("b", Shape((4, 2)))
    body = _scan_body(Shape((2,)))
    body_two = Graph("two")
    st, x1, _ = (body_two.input(n, Shape((2,))) for n in ("s", "x1", "x2"))
    body_two.set_outputs([body_two.binary(BinaryOp.ADD, st, x1), x1])
    node = g.add_node(Scan(body_two, 1, (), (), (1,)), [s, a, b])
    assert g.node(node).shape == (Shape((2,)), Shape((2, 4)))
    with pytest.raises(ShapeError, match="scan inputs have lengths 4 and 3"):
        g.add_node(Scan(body_two, 1), [s, b, g.input("c", Shape((3, 2)))])
    with pytest.raises(ShapeError, match="scan_input_directions must be 0 or 1"):
        g.add_node(Scan(body, 1, (), (2,)), [s, b])
    with pytest.raises(ShapeError, match="scan_output_axes has 2 entries, expected 1"):
        g.add_node(Scan(body, 1, (), (), (0, 0)), [s, b])
    with pytest.raises(ShapeError, match="no scan input"):
        g.add_node(Scan(body, 1), [s])
    with pytest.raises(ShapeError, match="scan input 0: axis 2 out of range"):
        g.add_node(Scan(body, 1, (2,)), [s, b])


def test_scan_over_empty_sequence():
    g = Graph("outer")
    si, xi = g.input("s0", Shape((2,))), g.input("xs", Shape(("t", 2)))
    g.set_outputs(g.unpack(g.add_node(Scan(_scan_body(Shape((2,))), 1), [si, xi])))
    s0 = np.float32([1, 2])
    final, ys = _run(g, {"s0": s0, "xs": np.zeros((0, 2), np.float32)})
    _close([final], [s0])
    assert ys.shape == (0, 2)


# -- subgraphs: verify and JSON ------------------------------------------------------------
def _loop_graph() -> Graph:
    g = Graph("outer")
    m, cond = g.constant(np.int64(3)), g.constant(np.bool_(True))
    si, xi = g.input("s0", Shape((3,))), g.input("x", Shape((3,)))
    g.set_outputs(g.unpack(g.add_node(Loop(_running_sum_body(10), 1), [m, cond, si, xi])))
    return g


def test_verify_checks_subgraphs():
    verify(_loop_graph())
    body = Graph("bad_body")
    s = body.input("s", Shape((2,)))
    body.input("x", Shape((2,)))
    wrong = body.add_node(Identity(), [s], Shape((5,)))  # declared shape contradicts inference
    body.set_outputs([s, wrong])
    g = Graph("outer")
    si, xi = g.input("s0", Shape((2,))), g.input("xs", Shape((3, 2)))
    g.add_node(Scan(body, 1), [si, xi])
    with pytest.raises(ShapeError, match="graph 'bad_body'.*declared f32\\[5\\]"):
        verify(g)


def test_control_flow_survives_json():
    g = _loop_graph()
    back = graph_from_json(graph_to_json(g))
    feeds = {"s0": np.float32([1, 2, 3]), "x": np.float32([0.5, -1, 2])}
    _close(_run(back, feeds), _run(g, feeds), tol=0)
    lstm = LSTM(3, RnnDirection.BIDIRECTIONAL, ("HardSigmoid",) * 6, (0.3,), (0.6,), 2.5,
                layout=1, present=("B", "P"), input_forget=True)
    h = Graph("h")
    x = h.input("x", Shape((2, 5, 4)))
    w, r = h.input("w", Shape((2, 12, 4))), h.input("r", Shape((2, 12, 3)))
    b, p = h.input("b", Shape((2, 24))), h.input("p", Shape((2, 9)))
    h.set_outputs(h.unpack(h.add_node(lstm, [x, w, r, b, p])))
    assert graph_from_json(graph_to_json(h)).node(5).op == lstm


# -- LSTM / GRU / RNN ----------------------------------------------------------------------
_GATES = {LSTM: 4, GRU: 3, RNN: 1}
SEQ, BATCH, IN, HID = 5, 3, 4, 3


def _rnn_inputs(cls, direction: RnnDirection, layout: int, optional: tuple[str, ...],
                dtype=np.float32, lens=None) -> dict[str, np.ndarray]:
    """Random X, W, R and the named optional inputs, shaped for `layout`."""
    d, g = direction.count, _GATES[cls]
    x_shape = (BATCH, SEQ, IN) if layout else (SEQ, BATCH, IN)
    state = (BATCH, d, HID) if layout else (d, BATCH, HID)
    shapes = {"X": x_shape, "W": (d, g * HID, IN), "R": (d, g * HID, HID),
              "B": (d, 2 * g * HID), "initial_h": state, "initial_c": state, "P": (d, 3 * HID)}
    values = {k: (RNG.standard_normal(shapes[k]) * 0.7).astype(dtype)
              for k in ("X", "W", "R", *optional) if k != "sequence_lens"}
    if "sequence_lens" in optional:
        values["sequence_lens"] = np.array(lens, np.int32)
    return values


_ONNX_ORDER = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


def _ours(cls, values: dict[str, np.ndarray], **attrs) -> list[np.ndarray]:
    present = tuple(k for k in cls.optional_inputs if k in values)
    op = cls(HID, present=present, **attrs)
    return run_op(op, [values[k] for k in ("X", "W", "R", *present)])


def _onnx_args(cls, values: dict[str, np.ndarray], attrs: dict) -> tuple[list, dict]:
    names = _ONNX_ORDER[:3 + len(cls.optional_inputs)]
    onnx_attrs = {k: (v.value if isinstance(v, RnnDirection) else v) for k, v in attrs.items()
                  if v != ()}  # onnx.helper cannot type an empty list
    for key in ("input_forget", "linear_before_reset"):
        if key in onnx_attrs:
            onnx_attrs[key] = int(onnx_attrs[key])
    return [values.get(n) for n in names], dict(hidden_size=HID, **onnx_attrs)


def _reference(cls, values, **attrs) -> list[np.ndarray]:
    inputs, onnx_attrs = _onnx_args(cls, values, attrs)
    return onnx_reference(cls.__name__, inputs, n_outputs=cls.n_outputs, opset=14,
                          **onnx_attrs)


def _onnxruntime(cls, values, **attrs) -> list[np.ndarray]:
    inputs, onnx_attrs = _onnx_args(cls, values, attrs)
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    outs = [f"out{i}" for i in range(cls.n_outputs)]
    node = helper.make_node(cls.__name__, names, outs, **onnx_attrs)
    return _ort([node], {n: v for n, v in zip(names, inputs) if v is not None}, outs,
                opset=14)


@pytest.mark.parametrize("cls", [LSTM, GRU, RNN])
@pytest.mark.parametrize("direction", list(RnnDirection))
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("with_optional", [False, True])
def test_recurrence_matches_onnx_reference(cls, direction, layout, with_optional):
    optional = tuple(n for n in cls.optional_inputs if n != "sequence_lens") \
        if with_optional else ()
    values = _rnn_inputs(cls, direction, layout, optional)
    attrs = dict(direction=direction, layout=layout)
    _close(_ours(cls, values, **attrs), _reference(cls, values, **attrs))


@pytest.mark.parametrize("cls", [LSTM, GRU, RNN])
@pytest.mark.parametrize("direction", list(RnnDirection))
def test_recurrence_sequence_lens_matches_onnxruntime(cls, direction):
    optional = tuple(cls.optional_inputs)  # every optional input, sequence_lens included
    values = _rnn_inputs(cls, direction, 0, optional, lens=[5, 2, 4])
    ours = _ours(cls, values, direction=direction)
    _close(ours, _onnxruntime(cls, values, direction=direction))
    y = ours[0]
    assert not y[2:, :, 1].any() and not y[4:, :, 2].any()  # padding steps are zero


@pytest.mark.parametrize("cls,direction,activations,alpha,beta", [
    (LSTM, RnnDirection.FORWARD, ("HardSigmoid", "Elu", "Softsign"), (0.3, 0.9), (0.4,)),
    (LSTM, RnnDirection.BIDIRECTIONAL,
     ("Sigmoid", "ScaledTanh", "Affine", "HardSigmoid", "LeakyRelu", "Softplus"),
     (1.2, 0.7, 0.25, 0.1), (0.8, -0.3, 0.55)),
    (GRU, RnnDirection.REVERSE, ("Sigmoid", "Relu"), (), ()),
    (GRU, RnnDirection.BIDIRECTIONAL, ("HardSigmoid", "Softsign", "Sigmoid", "Elu"),
     (0.25, 0.5), (0.45,)),
    (RNN, RnnDirection.FORWARD, ("ThresholdedRelu",), (0.2,), ()),
    (RNN, RnnDirection.BIDIRECTIONAL, ("Affine", "Tanh"), (0.5,), (0.1,)),
])
def test_recurrence_activations_match_onnxruntime(cls, direction, activations, alpha, beta):
    values = _rnn_inputs(cls, direction, 0, ("B", "initial_h"))
    attrs = dict(direction=direction, activations=activations, activation_alpha=alpha,
                 activation_beta=beta)
    _close(_ours(cls, values, **attrs), _onnxruntime(cls, values, **attrs))


@pytest.mark.parametrize("direction", list(RnnDirection))
@pytest.mark.parametrize("linear_before_reset", [False, True])
@pytest.mark.parametrize("optional", [(), ("B", "initial_h"), ("B", "sequence_lens"),
                                      ("sequence_lens", "initial_h")])
def test_gru_steps_match_onnxruntime(direction, linear_before_reset, optional):
    """The GRU step's two forms (one recurrent product with linear_before_reset, two
    without) in every direction, with and without initial state and sequence_lens."""
    values = _rnn_inputs(GRU, direction, 0, optional, lens=[4, 5, 1])
    attrs = dict(direction=direction, linear_before_reset=linear_before_reset)
    _close(_ours(GRU, values, **attrs), _onnxruntime(GRU, values, **attrs))


@pytest.mark.parametrize("cls,attrs", [
    (LSTM, dict(clip=0.4)),
    (LSTM, dict(input_forget=True, direction=RnnDirection.BIDIRECTIONAL)),
    (GRU, dict(clip=0.3, direction=RnnDirection.BIDIRECTIONAL)),
    (GRU, dict(linear_before_reset=True, direction=RnnDirection.REVERSE)),
    (RNN, dict(clip=0.2)),
])
def test_recurrence_clip_and_gate_options_match_onnxruntime(cls, attrs):
    values = _rnn_inputs(cls, attrs.get("direction", RnnDirection.FORWARD), 0,
                         tuple(cls.optional_inputs), lens=[3, 5, 1])
    _close(_ours(cls, values, **attrs), _onnxruntime(cls, values, **attrs))


def test_recurrence_in_float64_and_float16_and_with_rnn_default_activation_pair():
    values = _rnn_inputs(GRU, RnnDirection.FORWARD, 0, ("B",), dtype=np.float64)
    ours = _ours(GRU, values, linear_before_reset=True)
    assert ours[0].dtype == np.float64
    _close(ours, _reference(GRU, values, linear_before_reset=True), tol=1e-12)
    values = _rnn_inputs(LSTM, RnnDirection.REVERSE, 1, ("B", "P"), dtype=np.float16)
    ours = _ours(LSTM, values, direction=RnnDirection.REVERSE, layout=1)
    assert ours[0].dtype == np.float16
    as_f32 = {k: v.astype(np.float32) for k, v in values.items()}
    theirs = _reference(LSTM, as_f32, direction=RnnDirection.REVERSE, layout=1)
    _close([o.astype(np.float32) for o in ours], theirs, tol=3e-3)
    # ONNX's RNN schema default lists ("Tanh", "Tanh") even for one direction
    values = _rnn_inputs(RNN, RnnDirection.FORWARD, 0, ())
    _close(_ours(RNN, values, activations=("Tanh", "Tanh")), _reference(RNN, values))


def test_recurrence_shapes():
    op = LSTM(HID, RnnDirection.BIDIRECTIONAL, layout=1, present=("sequence_lens",))
    g = Graph("g")
    x = g.input("x", Shape(("b", "t", IN)))
    w, r = g.input("w", Shape((2, 12, IN))), g.input("r", Shape((2, 12, HID)))
    lens = g.input("lens", Shape(("b",), DType.I32))
    node = g.add_node(op, [x, w, r, lens])
    assert g.node(node).shape == (Shape(("b", "t", 2, HID)), Shape(("b", 2, HID)),
                                  Shape(("b", 2, HID)))


def test_recurrence_shape_errors():
    g = Graph("g")
    x = g.input("x", Shape((SEQ, BATCH, IN)))
    w, r = g.input("w", Shape((1, 4 * HID, IN))), g.input("r", Shape((1, 4 * HID, HID)))
    b = g.input("b", Shape((1, 8 * HID)))
    with pytest.raises(ShapeError, match="LSTM: W must be \\[2, 12, 4\\], got f32\\[1, 12, 4\\]"):
        g.add_node(LSTM(HID, RnnDirection.BIDIRECTIONAL), [x, w, r])
    with pytest.raises(ShapeError, match="present must list inputs"):
        g.add_node(LSTM(HID, present=("P", "B")), [x, w, r, b, b])
    with pytest.raises(ShapeError, match="GRU: present must list"):
        g.add_node(GRU(HID, present=("initial_c",)), [x, w, r, b])
    with pytest.raises(ShapeError, match="unknown activation"):
        g.add_node(LSTM(HID, activations=("Sigmoid", "Tanh", "Swish")), [x, w, r])
    with pytest.raises(ShapeError, match="expected 3 activations for forward, got 1"):
        g.add_node(LSTM(HID, activations=("Tanh",)), [x, w, r])
    with pytest.raises(ShapeError, match="LSTM: 4 inputs, expected 3"):
        g.add_node(LSTM(HID), [x, w, r, b])
    with pytest.raises(ShapeError, match="layout must be 0 or 1"):
        g.add_node(LSTM(HID, layout=2), [x, w, r])
    with pytest.raises(ShapeError, match="needs floating-point"):
        g.add_node(RNN(HID), [g.input("xi", Shape((SEQ, BATCH, IN), DType.I32))] * 3)
    with pytest.raises(GraphError, match="LSTM takes 3..8 inputs"):
        g.add_node(LSTM(HID), [x, w])


@pytest.mark.parametrize("cls", [LSTM, GRU, RNN])
def test_recurrence_weights_laid_out_once_follow_new_weight_arrays(cls):
    """The compiled step lays the weights out once per weight array (transposed, biases
    summed): the same arrays again reuse it, new ones (weights fed as inputs) are laid out
    anew; both runs match onnx.reference."""
    from rlx.runtime import Session
    from tests.support import build_op_graph

    optional = ("B",)
    first = _rnn_inputs(cls, RnnDirection.BIDIRECTIONAL, 0, optional)
    second = _rnn_inputs(cls, RnnDirection.BIDIRECTIONAL, 0, optional)
    op = cls(HID, direction=RnnDirection.BIDIRECTIONAL, present=optional)
    names = ("X", "W", "R", "B")
    graph, _ = build_op_graph(op, [first[k] for k in names])
    compiled = Session().compile(graph)
    for values in (first, second, first):
        got = compiled.run({f"in{i}": values[k] for i, k in enumerate(names)})
        _close(got, _reference(cls, values, direction=RnnDirection.BIDIRECTIONAL))
