"""The size profile on synthetic ONNX models, one weight-reading op each.

Oracle: onnxruntime on the same model whose weight is replaced by what the `gguf` package
decodes from its own quantisation of that weight, in the order the rule describes (Conv:
C_in/group x kH x kW contiguous per output channel; ConvTranspose: the same after swapping
its two channel axes; Gemm/MatMul: along K; Gather: one row per table entry; LSTM: along the
input axis). Rows that DequantMatMul or DequantGather read are zero-padded to whole blocks;
a weight decoded whole whose rows are not whole blocks is one row, padded at its end. rlx
must compute the same numbers up to float rounding, and store the weight in the encoding
the rule says.
"""

from __future__ import annotations

import gguf
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gguf.quants import dequantize, quantize
from onnx import TensorProto, helper, numpy_helper

from rlx import BakeOptions, bake
from rlx.codecs import Encoding
from rlx.ir import (
    Constant,
    ConvInteger,
    DecodeWeight,
    DequantGather,
    DequantizeLinear,
    DequantMatMul,
    DType,
)
from rlx.onnx import import_onnx
from rlx.runtime import Session

Q8 = gguf.GGMLQuantizationType.Q8_0
RNG = np.random.default_rng(11)


def _q8_rows(matrix: np.ndarray) -> np.ndarray:
    """What gguf decodes from Q8_0 rows of `matrix` [R, L], each zero-padded to 32."""
    rows, length = matrix.shape
    pad = -length % 32
    padded = np.pad(matrix.astype(np.float32), ((0, 0), (0, pad)))
    return dequantize(quantize(padded, Q8), Q8)[:, :length]


def _q8_whole(stored: np.ndarray) -> np.ndarray:
    """What gguf decodes from Q8_0 of `stored` as one row (its values in row-major order,
    zero-padded to 32 at the end), in `stored`'s shape."""
    return _q8_rows(stored.reshape(1, -1)).reshape(stored.shape)


def _model(op: str, inputs: list[tuple[str, list, int]], weights: dict[str, np.ndarray],
           out_shape: list, node_inputs: list[str], **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, node_inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "one_op",
        [helper.make_tensor_value_info(n, t, s) for n, s, t in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _with(model: onnx.ModelProto, name: str, value: np.ndarray) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, init in enumerate(out.graph.initializer):
        if init.name == name:
            out.graph.initializer[i].CopyFrom(numpy_helper.from_array(
                value.astype(np.float32), name))
    return out


def _bake_and_run(model: onnx.ModelProto, feeds: dict, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    graph, bindings = import_onnx(path)
    file, report = bake(graph, bindings, BakeOptions.from_profile("size"))
    (out,) = Session().compile(file.into_runtime_graph()).run(feeds)
    return out, file, report


def _conv_case(groups: int):
    w = RNG.standard_normal((16, 8 // groups, 3, 3)).astype(np.float32)
    model = _model("Conv", [("x", [1, 8, 9, 9], TensorProto.FLOAT)], {"w": w}, [1, 16, 9, 9],
                   ["x", "w"], pads=[1, 1, 1, 1], group=groups)
    # rows of 72 (or 36) values are not whole blocks: one row of the whole tensor
    decoded = _q8_whole(w)
    return model, {"x": RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)}, "w", decoded


def _conv_transpose_case():
    w = RNG.standard_normal((8, 16, 3, 3)).astype(np.float32)  # [C_in, C_out, kH, kW]
    model = _model("ConvTranspose", [("x", [1, 8, 5, 5], TensorProto.FLOAT)], {"w": w},
                   [1, 16, 11, 11], ["x", "w"], strides=[2, 2])
    swapped = w.transpose(1, 0, 2, 3)
    decoded = _q8_whole(swapped).transpose(1, 0, 2, 3)
    return model, {"x": RNG.standard_normal((1, 8, 5, 5)).astype(np.float32)}, "w", decoded


def _gemm_case():
    b = RNG.standard_normal((40, 64)).astype(np.float32)  # transB: [N, K]
    c = RNG.standard_normal((40,)).astype(np.float32)
    model = _model("Gemm", [("x", [3, 64], TensorProto.FLOAT)], {"b": b, "c": c}, [3, 40],
                   ["x", "b", "c"], transB=1, alpha=0.5, beta=2.0)
    return model, {"x": RNG.standard_normal((3, 64)).astype(np.float32)}, "b", _q8_rows(b)


def _matmul_left_case():
    a = RNG.standard_normal((24, 48)).astype(np.float32)  # constant LEFT operand, K = 48
    model = _model("MatMul", [("x", [48, 5], TensorProto.FLOAT)], {"a": a}, [24, 5],
                   ["a", "x"])
    return model, {"x": RNG.standard_normal((48, 5)).astype(np.float32)}, "a", _q8_whole(a)


def _lstm_case():
    hidden, inputs = 16, 40
    w = RNG.standard_normal((1, 4 * hidden, inputs)).astype(np.float32) * 0.3
    r = RNG.standard_normal((1, 4 * hidden, hidden)).astype(np.float32) * 0.3
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=hidden)
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 1, 1, hidden])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(r, "r")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    decoded = _q8_whole(w)  # rows of 40 inputs: one row
    model = _with(model, "r", _q8_whole(r))  # rows of H = 16: one row too, half f16's bytes
    return model, {"x": RNG.standard_normal((5, 1, inputs)).astype(np.float32)}, "w", decoded


@pytest.mark.parametrize("case, op_type", [
    (lambda: _conv_case(1), DecodeWeight), (lambda: _conv_case(2), DecodeWeight),
    (_conv_transpose_case, DecodeWeight), (_gemm_case, DequantMatMul),
    (_matmul_left_case, DecodeWeight), (_lstm_case, DecodeWeight),
], ids=["conv", "conv-groups", "conv-transpose", "gemm-transB", "matmul-left", "lstm"])
def test_q8_0_weights_compute_what_onnxruntime_computes_on_the_decoded_weights(
        case, op_type, tmp_path):
    model, feeds, name, decoded = case()
    out, file, report = _bake_and_run(model, feeds, tmp_path)
    want = _ort(_with(model, name, decoded), feeds)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    assert any(isinstance(n.op, op_type) for n in file.graph.nodes())
    assert report.optimize.encoded.get("gguf_q8_0", 0) >= 1
    # (Gemm's weight is the folded Transpose(b), named after that node; LSTM's R is f16)
    assert "gguf_q8_0" in {w.encoding for w in file.weights}


def test_embedding_rows_are_gathered_then_decoded(tmp_path):
    table = RNG.standard_normal((100, 48)).astype(np.float32)  # D = 48: padded to 64
    model = _model("Gather", [("ids", [2, 3], TensorProto.INT64)], {"t": table}, [2, 3, 48],
                   ["t", "ids"], axis=0)
    feeds = {"ids": np.array([[0, 99, -1], [5, 5, -100]], np.int64)}
    out, file, _ = _bake_and_run(model, feeds, tmp_path)
    np.testing.assert_allclose(out, _ort(_with(model, "t", _q8_rows(table)), feeds),
                               rtol=0, atol=1e-6)
    (gather,) = [n for n in file.graph.nodes() if isinstance(n.op, DequantGather)]
    row = file.weight("t")
    assert row.encoding == "gguf_q8_0" and row.shape == (100, 64) and row.nbytes == 100 * 68


def test_short_rows_go_q8_0_as_one_row_and_other_large_floats_f16(tmp_path):
    """A depthwise 3x3 row is 9 values: padded to a 32-value Q8_0 block it would take 34
    bytes, more than f16's 18, so the 64 rows are stored as one (612 bytes, f16: 1,152);
    an additive constant is no weight: f16 (when it holds)."""
    w = RNG.standard_normal((64, 1, 3, 3)).astype(np.float32)
    bias = RNG.standard_normal((1, 64, 6, 6)).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w"], ["h"], group=64, pads=[1, 1, 1, 1])
    add = helper.make_node("Add", ["h", "b"], ["y"])
    graph = helper.make_graph(
        [conv, add], "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 6, 6])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": RNG.standard_normal((1, 64, 6, 6)).astype(np.float32)}
    out, file, _ = _bake_and_run(model, feeds, tmp_path)
    decoded = _with(_with(model, "w", _q8_whole(w)), "b", bias.astype(np.float16))
    np.testing.assert_allclose(out, _ort(decoded, feeds), rtol=1e-5, atol=1e-5)
    assert (file.weight("w").encoding, file.weight("b").encoding) == ("gguf_q8_0", "f16")
    assert file.weight("w").nbytes == 18 * 34


def test_decode_weight_decodes_once_across_runs(tmp_path, monkeypatch):
    from rlx.ir.ops import packed as packed_ops  # DecodeWeight.dense, which the kernel runs

    model, feeds, _, _ = _conv_case(1)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    graph, bindings = import_onnx(path)
    file, _ = bake(graph, bindings, BakeOptions.from_profile("size"))
    calls = []
    real = packed_ops.decode_rows
    monkeypatch.setattr(packed_ops, "decode_rows",
                        lambda *a: calls.append(1) or real(*a))
    compiled = Session().compile(file.into_runtime_graph())
    first = compiled.run(feeds)[0]
    for _ in range(3):
        np.testing.assert_array_equal(compiled.run(feeds)[0], first)
    assert len(calls) == 1


def test_weights_captured_by_control_flow_go_by_their_readers_inside(tmp_path):
    """A Conv weight read inside both branches of an If (silero-vad's layout): the size
    profile follows the capture to the Conv and stores it as Q8_0 (one row: rows of 72 are
    not whole blocks), decoded before the If; the branches are unchanged."""
    w = RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)

    def branch(name: str, pads: list[int]) -> onnx.GraphProto:
        conv = helper.make_node("Conv", ["x", "w"], [f"{name}_y"], pads=pads)
        return helper.make_graph(
            [conv], name, [],
            [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])

    node = helper.make_node("If", ["c"], ["y"], then_branch=branch("then", [1, 1, 1, 1]),
                            else_branch=branch("else", [0, 0, 0, 0]))
    graph = helper.make_graph(
        [node], "captured",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    decoded = _with(model, "w", _q8_whole(w))
    for cond in (True, False):
        feeds = {"c": np.array(cond), "x": RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)}
        out, file, _ = _bake_and_run(model, feeds, tmp_path)
        np.testing.assert_allclose(out, _ort(decoded, feeds), rtol=1e-4, atol=1e-4)
    assert [w.encoding for w in file.weights] == ["gguf_q8_0"]
    assert any(isinstance(n.op, DecodeWeight) for n in file.graph.nodes())


def test_dequant_gather_refuses_an_index_past_the_table():
    from rlx.codecs import encode_rows
    from rlx.errors import KernelError
    from rlx.ir import DType, Graph, Shape

    table = RNG.standard_normal((10, 32)).astype(np.float32)
    g = Graph("gather")
    ids = g.input("ids", Shape([2], DType.I64))
    packed = g.constant(encode_rows(Encoding.GGUF_Q8_0, table), name="t")
    g.set_outputs([g.add_node(DequantGather(Encoding.GGUF_Q8_0, 10, 32), (packed, ids))])
    compiled = Session().compile(g)
    out = compiled.run({"ids": np.array([-10, 9])})[0]
    np.testing.assert_array_equal(out, _q8_rows(table)[[0, 9]])
    with pytest.raises(KernelError, match="index 10 is out of range for a table of 10 rows"):
        compiled.run({"ids": np.array([1, 10])})


def test_small_weights_go_f16_and_the_smallest_stay_f32(tmp_path):
    """Under 256 values a weight is not block-quantised (f16 at most: the narrow first layers
    are where an error weighs most); under 64 it stays f32. A 64-value bias goes f16."""
    w1 = RNG.standard_normal((8, 8, 1, 1)).astype(np.float32)  # 64 values: f16
    b1 = RNG.standard_normal(8).astype(np.float32)  # 8: f32
    w2 = RNG.standard_normal((64, 8, 1, 1)).astype(np.float32)  # 512: Q8_0, one row
    b2 = RNG.standard_normal(64).astype(np.float32)  # 64: f16
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"]),
             helper.make_node("Conv", ["h", "w2", "b2"], ["y"])]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 5, 5])],
        [numpy_helper.from_array(v, k) for k, v in
         {"w1": w1, "b1": b1, "w2": w2, "b2": b2}.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": RNG.standard_normal((1, 8, 5, 5)).astype(np.float32)}
    out, file, _ = _bake_and_run(model, feeds, tmp_path)
    decoded = _with(_with(_with(model, "w1", w1.astype(np.float16)), "w2", _q8_whole(w2)),
                    "b2", b2.astype(np.float16))
    np.testing.assert_allclose(out, _ort(decoded, feeds), rtol=1e-5, atol=1e-5)
    encodings = {n.op.shape: n.op.encoding for n in file.graph.nodes()
                 if isinstance(n.op, DecodeWeight)}
    assert encodings == {(8, 8, 1, 1): Encoding.F16, (64, 8, 1, 1): Encoding.GGUF_Q8_0,
                         (64,): Encoding.F16}


def _dequantized_conv(per_channel: bool):
    """Conv over DequantizeLinear(int8 codes, scale): weights a symmetric int8 quantiser
    made (the largest code of the tensor, or of each channel, is 127). Blocks' largest codes
    are below it, where Q8_0's per-block max / 127 would put them on another grid."""
    codes = RNG.integers(-127, 128, (16, 8, 3, 3)).astype(np.int8)
    limit = np.arange(16)[:, None, None, None] * 7 + 20
    codes = np.clip(codes, -limit, limit).astype(np.int8)
    codes[:, 0, 0, 0] = 127 if per_channel else 0
    codes[0, 0, 0, 0] = 127
    scale = (RNG.uniform(0.01, 0.02, 16) if per_channel else np.array(0.0123)).astype(
        np.float32)
    nodes = [helper.make_node("DequantizeLinear", ["q", "s"], ["w"], axis=0),
             helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 9, 9])],
        [numpy_helper.from_array(codes, "q"), numpy_helper.from_array(scale, "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, codes, scale


def _decoded_weights(file) -> list[np.ndarray]:
    return [n.op.dense(file.graph.node(n.inputs[0]).op.array(
        file.graph.node(n.inputs[0]).tensor_shape)) for n in file.graph.nodes()
        if isinstance(n.op, DecodeWeight)]


def _dequantized_codes(file) -> list[np.ndarray]:
    """The 8-bit constants the file's DequantizeLinear nodes read."""
    constants = [file.graph.node(n.inputs[0]) for n in file.graph.nodes()
                 if isinstance(n.op, DequantizeLinear)]
    return [c.op.array(c.tensor_shape) for c in constants
            if isinstance(c.op, Constant) and c.tensor_shape.dtype in (DType.I8, DType.U8)]


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_int8_quantised_weights_keep_their_codes(per_channel, tmp_path):
    """A dequantised int8 weight keeps its codes, 1 byte a value, behind its
    DequantizeLinear: nothing to encode, and exactly what onnxruntime computes."""
    model, codes, _ = _dequantized_conv(per_channel)
    feeds = {"x": RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)}
    out, file, report = _bake_and_run(model, feeds, tmp_path)
    (stored,) = _dequantized_codes(file)
    assert stored.dtype == np.int8 and np.array_equal(stored, codes)
    np.testing.assert_allclose(out, _ort(model, feeds), rtol=1e-5, atol=1e-5)
    assert not _decoded_weights(file) and not report.accuracy.tensors


def test_integer_op_weights_stay_exact(tmp_path):
    """ConvInteger's int8 weight stays int8 in the size profile too: its integer products
    equal onnxruntime's."""
    w = RNG.integers(-64, 64, (6, 8, 3, 3)).astype(np.int8)  # no AVX2 int16 saturation
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "ci", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 6, 7, 7])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": RNG.integers(0, 256, (1, 8, 7, 7)).astype(np.uint8)}
    out, file, report = _bake_and_run(model, feeds, tmp_path)
    np.testing.assert_array_equal(out, _ort(model, feeds))
    (conv,) = [n for n in file.graph.nodes() if isinstance(n.op, ConvInteger)]
    weight = file.graph.node(conv.inputs[1])
    assert isinstance(weight.op, Constant) and weight.tensor_shape.dtype is DType.I8
    assert np.array_equal(weight.op.array(weight.tensor_shape), w)
    assert not report.accuracy.tensors


def test_int8_quantised_matmul_weight_keeps_its_codes(tmp_path):
    """The same for a MatMul weight."""
    codes = np.clip(RNG.integers(-127, 128, (64, 40)), -90, 90).astype(np.int8)
    codes[3, 7] = -127
    scale = np.array(0.0071, np.float32)
    nodes = [helper.make_node("DequantizeLinear", ["q", "s"], ["w"]),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 40])],
        [numpy_helper.from_array(codes, "q"), numpy_helper.from_array(scale, "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": RNG.standard_normal((3, 64)).astype(np.float32)}
    out, file, _ = _bake_and_run(model, feeds, tmp_path)
    (stored,) = _dequantized_codes(file)
    assert np.array_equal(stored, codes)
    # onnxruntime would fuse DequantizeLinear + MatMul into an integer kernel: run it on
    # the float weight that the DequantizeLinear computes (one float32 product)
    plain = _model("MatMul", [("x", [3, 64], TensorProto.FLOAT)],
                   {"w": codes.astype(np.float32) * scale}, [3, 40], ["x", "w"])
    np.testing.assert_allclose(out, _ort(plain, feeds), rtol=1e-5, atol=1e-5)
    assert not any(isinstance(n.op, DequantMatMul) for n in file.graph.nodes())


def test_constants_that_reach_a_quantiser_stay_as_they_are(tmp_path):
    """A float constant whose values flow through elementwise ops into a quantiser (a
    QuantizeLinear: Round in rlx's IR) is not encoded: a rounded bias moves whole
    quantisation steps. The same bias with no quantiser after it goes f16; the weights of
    the Conv (whose output is what is quantised) still encode."""
    w = RNG.standard_normal((64, 8, 1, 1)).astype(np.float32)
    b = RNG.standard_normal(64).astype(np.float32)
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "scale")
    zero = numpy_helper.from_array(np.array(0, np.int8), "zero")

    def model(quantised: bool) -> onnx.ModelProto:
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]),
                 helper.make_node("Relu", ["c"], ["r" if quantised else "y"])]
        if quantised:
            nodes += [helper.make_node("QuantizeLinear", ["r", "scale", "zero"], ["q"]),
                      helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"])]
        graph = helper.make_graph(
            nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 5, 5])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 5, 5])],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"), scale, zero])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    feeds = {"x": RNG.standard_normal((1, 8, 5, 5)).astype(np.float32)}
    for quantised in (True, False):
        out, file, _ = _bake_and_run(model(quantised), feeds, tmp_path)
        encodings = {n.op.shape: n.op.encoding for n in file.graph.nodes()
                     if isinstance(n.op, DecodeWeight)}
        if quantised:
            assert encodings == {(64, 8, 1, 1): Encoding.GGUF_Q8_0}  # the bias stays f32
            decoded = _with(model(True), "w", _q8_whole(w))
        else:
            assert encodings == {(64, 8, 1, 1): Encoding.GGUF_Q8_0, (64,): Encoding.F16}
            decoded = _with(_with(model(False), "w", _q8_whole(w)), "b", b.astype(np.float16))
        np.testing.assert_allclose(out, _ort(decoded, feeds), rtol=1e-5, atol=1e-5)
