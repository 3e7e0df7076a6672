"""Shape arithmetic over symbolic dims is baked away, and the dims stay symbolic.

Each model is written with onnx.helper the way exporters write it (Shape -> Gather ->
Unsqueeze -> Concat -> Reshape, with Mul/Div/Add on the sizes); after the bake no shape
arithmetic is left, the Reshape is static with 0 / -1 placeholders, and the results match
onnxruntime on the original model at several input sizes, on rlx's numpy runtime and on
its onnxruntime engine (whose exported model keeps the symbolic inputs)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import rlx
from rlx import BakeOptions, BakeProfile, bake, write_rlx
from rlx.onnx import export_onnx, import_onnx
from rlx.runtime import Session


class Builder:
    """Nodes and initializers of one ONNX graph, named in order."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, value, dtype=np.int64) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        out = f"{op_type.lower()}{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def size(self, x: str, axis: int) -> str:
        """x.shape[axis] as a scalar, as exporters compute it."""
        return self.op("Gather", self.op("Shape", x), self.const(axis))

    def vector(self, *scalars: str) -> str:
        return self.op("Concat", *(self.op("Unsqueeze", s, self.const([0])) for s in scalars),
                       axis=0)

    def model(self, inputs: Sequence, output: str, out_dims: Sequence) -> bytes:
        graph = helper.make_graph(
            self.nodes, "symbolic",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in inputs],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, out_dims)],
            initializer=self.inits)
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        onnx.checker.check_model(proto, full_check=True)
        return proto.SerializeToString()


def flatten_by_shape() -> bytes:
    b = Builder()
    target = b.op("Concat", b.op("Unsqueeze", b.size("x", 0), b.const([0])), b.const([-1]),
                  axis=0)
    out = b.op("Reshape", "x", target)
    return b.model([("x", ["N", 3, 4, 5])], out, ["N", 60])


def view_b_c_hw() -> bytes:
    b = Builder()
    hw = b.op("Mul", b.size("x", 2), b.size("x", 3))
    out = b.op("Reshape", "x", b.vector(b.size("x", 0), b.size("x", 1), hw))
    return b.model([("x", ["B", 8, "H", "W"])], out, ["B", 8, "HW"])


def attention_heads() -> bytes:
    """[B, S, 64] -> 4 heads of 16 and back; the key side is `2*S + 1` long (two copies of
    the sequence and a summary row), its length computed as Gather*2+1."""
    b = Builder()
    rng = np.random.default_rng(0)
    w = b.const(rng.standard_normal((64, 64)) / 8, np.float32)
    q = b.op("MatMul", "x", w)
    first = b.op("Slice", "x", b.const([0]), b.const([1]), b.const([1]))
    keys = b.op("Concat", "x", "x", first, axis=1)
    batch, seq = b.size(q, 0), b.size(q, 1)
    key_len = b.op("Add", b.op("Mul", seq, b.const(2)), b.const(1))
    heads = b.vector(batch, seq, b.op("Div", b.size(q, 2), b.const(16)))
    qh = b.op("Transpose", b.op("Reshape", q, b.op("Concat", heads, b.const([16]), axis=0)),
              perm=[0, 2, 1, 3])
    kh = b.op("Transpose", b.op("Reshape", keys, b.op(
        "Concat", b.vector(batch, key_len), b.const([4, 16]), axis=0)), perm=[0, 2, 3, 1])
    scores = b.op("Softmax", b.op("MatMul", qh, kh), axis=-1)
    vh = b.op("Transpose", kh, perm=[0, 1, 3, 2])
    merged = b.op("Transpose", b.op("MatMul", scores, vh), perm=[0, 2, 1, 3])
    out = b.op("Reshape", merged, b.vector(batch, seq, b.op("Mul", b.const(4), b.const(16))))
    return b.model([("x", ["B", "S", 64])], out, ["B", "S", 64])


def cnn_to_lstm(steps_from_input: bool = True) -> bytes:
    """Two stride-2 convolutions make the width a quarter; the feature map becomes a
    sequence of width/4 steps (as CRNN OCR models feed their LSTM), counted from the input
    (`width/4`, a name the baked output keeps) or read off the feature map (a size no
    inference names: the output keeps its declared `seqlen`)."""
    b = Builder()
    rng = np.random.default_rng(1)
    w1 = b.const(rng.standard_normal((4, 1, 3, 3)) / 3, np.float32)
    w2 = b.const(rng.standard_normal((8, 4, 3, 3)) / 6, np.float32)
    conv = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    f = b.op("Conv", b.op("Relu", b.op("Conv", "x", w1, **conv)), w2, **conv)
    seq = b.op("Transpose", f, perm=[3, 0, 1, 2])
    steps = b.op("Div", b.size("x", 3), b.const(4)) if steps_from_input else b.size(f, 3)
    features = b.op("Mul", b.size(f, 1), b.size(f, 2))
    x_seq = b.op("Reshape", seq, b.vector(steps, b.size(f, 0), features))
    hidden = 16
    weights = [b.const(rng.standard_normal((1, 4 * hidden, n)) / 8, np.float32)
               for n in (64, hidden)]
    y = f"lstm{len(b.nodes)}"
    b.nodes.append(helper.make_node("LSTM", [x_seq, *weights], [y], hidden_size=hidden))
    out = b.op("Squeeze", y, b.const([1]))
    return b.model([("x", [1, 1, 32, "width"])], out, ["seqlen", 1, hidden])


CASES = {  # name: (model, input shapes, output dims after the bake)
    "flatten_by_shape": (flatten_by_shape, [(1, 3, 4, 5), (3, 3, 4, 5)], ("N", 60)),
    "view_b_c_hw": (view_b_c_hw, [(1, 8, 3, 5), (2, 8, 4, 7)], ("B", 8, "H*W")),
    "attention_heads": (attention_heads, [(1, 5, 64), (2, 9, 64)], ("B", "S", 64)),
    "cnn_to_lstm": (cnn_to_lstm, [(1, 1, 32, 64), (1, 1, 32, 100)],
                    ("floor(width/4)", 1, 16)),
    "cnn_to_lstm_steps_read_off": (lambda: cnn_to_lstm(False),
                                   [(1, 1, 32, 64), (1, 1, 32, 99)], ("seqlen", 1, 16)),
}


def _count(ops: dict[str, int], names: Sequence[str]) -> int:
    return sum(ops.get(n, 0) for n in names)


@pytest.fixture(scope="module", params=sorted(CASES))
def baked(request, tmp_path_factory):
    build, sizes, dims = CASES[request.param]
    model = build()
    graph, bindings = import_onnx(model)
    file, report = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.FOLD))
    path = tmp_path_factory.mktemp(request.param) / "model.rlx"
    write_rlx(path, file)
    return model, file, report, path, sizes, dims


def test_no_shape_arithmetic_survives(baked):
    """Every integer computation was shape arithmetic: none is left."""
    _, file, report, _, _, _ = baked
    assert _count(report.op_types_before, ("Shape",)) > 0
    integer = [n.label for n in file.graph.nodes() if not isinstance(n.shape, tuple)
               and type(n.op).__name__ not in ("Constant", "Input")
               and not n.shape.dtype.is_float]
    assert integer == []
    reshapes = [n for n in file.graph.nodes() if type(n.op).__name__ == "Reshape"]
    assert reshapes and all(n.op.shape is not None for n in reshapes)


def test_output_dims_stay_symbolic(baked):
    _, file, _, _, _, dims = baked
    out = file.graph.node(file.graph.outputs[0])
    assert out.tensor_shape.dims == dims


def test_results_match_onnxruntime_at_every_size(baked):
    model, file, _, path, sizes, _ = baked
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    numpy_runtime = Session().compile(file.into_runtime_graph())
    on_ort = rlx.load(path, engine="onnxruntime", cache_dir=path.parent / "cache")
    for seed, shape in enumerate(sizes):
        feeds = {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
        (want,) = oracle.run(None, feeds)
        for got in (numpy_runtime.run(feeds)[0], on_ort.run(feeds)[0]):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_export_keeps_the_inputs_symbolic(baked):
    _, file, _, _, _, _ = baked
    exported = export_onnx(file)
    dims = exported.graph.input[0].type.tensor_type.shape.dim
    assert any(d.dim_param for d in dims) and not any(
        n.op_type == "Shape" for n in exported.graph.node)


def test_a_state_of_the_batch_size_reads_the_batch_off_the_input():
    """A zero state `ConstantOfShape([batch, 16])` must stay dynamic, but its size needs no
    Gather + Unsqueeze: one `Shape(x, start=0, end=1)` gives the batch as a vector."""
    b = Builder()
    size = b.op("Concat", b.vector(b.size("x", 0)), b.const([16]), axis=0)
    zeros = b.op("ConstantOfShape", size, value=helper.make_tensor("v", TensorProto.FLOAT,
                                                                  [1], [0.5]))
    w = b.const(np.random.default_rng(2).standard_normal((8, 16)), np.float32)
    out = b.op("Add", b.op("MatMul", "x", w), zeros)
    model = b.model([("x", ["B", 8])], out, ["B", 16])
    graph, bindings = import_onnx(model)
    file, report = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.FOLD))
    shape_of = [n.op for n in file.graph.nodes() if type(n.op).__name__ == "ShapeOf"]
    assert report.op_types_after.get("Gather", 0) == report.op_types_after.get("Unsqueeze", 0) \
        == 0 and [(op.start, op.end) for op in shape_of] == [(0, 1)]
    assert file.graph.node(file.graph.outputs[0]).tensor_shape.dims == ("B", 16)
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    ours = Session().compile(file.into_runtime_graph())
    for batch in (1, 4):
        feeds = {"x": np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)}
        np.testing.assert_allclose(ours.run(feeds)[0], oracle.run(None, feeds)[0], rtol=1e-5,
                                   atol=1e-5)
