"""onnxruntime's quantised com.microsoft ops against onnxruntime, one node each: integer
outputs must be equal bit for bit."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from rlx import BakeOptions, BakeProfile, bake
from rlx.onnx import import_onnx
from rlx.runtime import Session
from tests.frontends.contrib.oracle import Const, assert_same, one_node, run_both

F32 = np.float32
rng = np.random.default_rng(0)


def q(shape, dtype=np.uint8, seed=0):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


def weights(shape, dtype=np.int8, seed=0):
    """int8 weights in [-64, 63]: with uint8 activations no adjacent pair of products
    leaves int16 (see test_onnxruntime_u8s8_saturates_on_avx2)."""
    if dtype != np.int8:
        return q(shape, dtype, seed)
    return np.random.default_rng(seed).integers(-64, 64, shape).astype(np.int8)


def test_onnxruntime_u8s8_saturates_on_avx2():
    """Why the weights above are small: onnxruntime's uint8 x int8 kernel on AVX2 (without
    VNNI) sums adjacent pairs of products in int16 (vpmaddubsw) and saturates them. rlx
    computes the exact product the ONNX definition asks for; onnxruntime's result is
    reproduced exactly by pairwise int16 saturation, or equals the exact one on CPUs with
    VNNI."""
    a = q((16, 32), np.uint8, 1)
    b = q((32, 8), np.int8, 2)
    got, want = run_both("MatMulInteger", [a, Const(b)], domain="")
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(got[0], exact)
    pairs = (a.astype(np.int64)[:, :, None] * b.astype(np.int64)[None]).reshape(16, 16, 2, 8)
    saturated = np.clip(pairs.sum(2), -32768, 32767).sum(1)
    assert np.array_equal(want[0], exact) or np.array_equal(want[0], saturated)


def scale(value):
    return Const(np.array(value, F32))


def zero(value, dtype=np.uint8):
    return Const(np.array(value, dtype))


TYPES = [np.uint8, np.int8]


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("b_shape", [(2, 3, 4, 5), (5,), ()])
def test_qlinear_binary(dtype, op, b_shape):
    z = 3 if dtype == np.int8 else 128
    a, b = q((2, 3, 4, 5), dtype, 1), q(b_shape, dtype, 2)
    inputs = [a, scale(0.0173), zero(z, dtype), b, scale(0.0291), zero(z - 7, dtype),
              scale(0.031 if op == "QLinearAdd" else 0.21), zero(z + 5, dtype)]
    got, want = run_both(op, inputs)
    assert_same(got, want)


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}),
                                      ("QLinearLeakyRelu", {"alpha": 0.1})])
def test_qlinear_lookup_ops(dtype, op, attrs):
    # every input value, so every table entry is compared
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype).reshape(4, 64)
    zx = 0 if dtype == np.int8 else 120
    zy = -128 if dtype == np.int8 and op == "QLinearSigmoid" else zx
    got, want = run_both(op, [x, scale(0.05), zero(zx, dtype), scale(1 / 255 if op ==
                         "QLinearSigmoid" else 0.04), zero(zy, dtype)], **attrs)
    assert_same(got, want)


@pytest.mark.parametrize("dtype", TYPES)
def test_qlinear_concat(dtype):
    z = 0 if dtype == np.int8 else 128
    inputs = [scale(0.02), zero(z, dtype),
              q((1, 2, 3), dtype, 1), scale(0.02), zero(z, dtype),  # same as Y: copied
              q((1, 4, 3), dtype, 2), scale(0.035), zero(z - 10, dtype),
              q((1, 1, 3), dtype, 3), scale(0.011), zero(z + 3, dtype)]
    got, want = run_both("QLinearConcat", inputs, axis=1)
    assert_same(got, want)


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool(dtype, channels_last):
    z = 5 if dtype == np.int8 else 130
    x = q((2, 7, 5, 6), dtype, 1)
    got, want = run_both("QLinearGlobalAveragePool",
                         [x, scale(0.03), zero(z, dtype), scale(0.011), zero(z - 9, dtype)],
                         channels_last=channels_last)
    assert_same(got, want)


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3]},
                                   {"kernel_shape": [3, 3], "strides": [2, 2],
                                    "pads": [1, 1, 1, 1]},
                                   {"kernel_shape": [2, 3], "pads": [1, 1, 0, 1],
                                    "count_include_pad": 1}])
def test_qlinear_average_pool(dtype, attrs):
    z = 5 if dtype == np.int8 else 130
    x = q((1, 3, 7, 6), dtype, 1)
    got, want = run_both("QLinearAveragePool",
                         [x, scale(0.03), zero(z, dtype), scale(0.021), zero(z - 9, dtype)],
                         **attrs)
    assert_same(got, want)


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 1), (1, 1)])
@pytest.mark.parametrize("x_scale,y_scale,length", [
    (0.1, 1 / 256, 10),
    (0.23951402, 0.00392157, 64),  # minilm-l3's attention: floor(1 / y_scale) is 254
    (0.7, 0.003, 33)])  # outputs past the type's range saturate
def test_qlinear_softmax(dtype, opset, axis, x_scale, y_scale, length):
    z = -128 if dtype == np.int8 else 0
    x = q((3, 5, length), dtype, 1)
    got, want = run_both("QLinearSoftmax", [x, scale(x_scale), zero(z + 20, dtype),
                                            scale(y_scale), zero(z, dtype)],
                         opset=opset, axis=axis)
    assert_same(got, want)


def test_qlinear_softmax_with_a_scale_known_at_run_time():
    """onnxruntime then builds its table of exponentials per call: so does rlx's graph."""
    x = q((4, 64), np.uint8, 2)
    got, want = run_both("QLinearSoftmax", [x, np.array(0.2395, F32), zero(202),
                                            scale(1 / 255), zero(0)], opset=13, axis=-1)
    assert_same(got, want)


def test_qlinear_softmax_over_a_symbolic_length():
    """The table's headroom depends on the row length, read from the shape at run time."""
    model, _ = one_node("QLinearSoftmax", [q((2, 1), np.uint8), scale(0.2395), zero(202),
                                           scale(1 / 255), zero(0)], opset=13, axis=-1)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "length"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    oracle = ort.InferenceSession(model.SerializeToString(), options,
                                  providers=["CPUExecutionProvider"])
    graph, bindings = import_onnx(model)
    compiled = Session().compile(bake(graph, bindings, BakeOptions.from_profile(
        BakeProfile.EXACT))[0].into_runtime_graph())
    for length in (7, 64, 300):
        feeds = {"in0": q((2, length), np.uint8, length)}
        assert_same(compiled.run(feeds), oracle.run(None, feeds))


@pytest.mark.parametrize("a_type", TYPES)
@pytest.mark.parametrize("quantised_out", [True, False])
@pytest.mark.parametrize("trans_b,per_column", [(0, False), (1, True)])
def test_qgemm(a_type, quantised_out, trans_b, per_column):
    za = 10 if a_type == np.int8 else 120
    a = q((4, 16), a_type, 1)
    b = weights((6, 16) if trans_b else (16, 6), np.int8, 2)
    b_scale = Const((np.arange(6) * 0.001 + 0.004).astype(F32)) if per_column else scale(0.005)
    b_zero = Const(np.zeros(6, np.int8)) if per_column else zero(0, np.int8)
    c = Const(np.random.default_rng(3).integers(-3000, 3000, 6).astype(np.int32))
    inputs = [a, scale(0.02), zero(za, a_type), Const(b), b_scale, b_zero, c]
    if quantised_out:
        inputs += [scale(0.07), zero(za - 3, a_type)]
    got, want = run_both("QGemm", inputs, transB=trans_b, alpha=0.9)
    assert_same(got, want, 0.0 if quantised_out else 1e-6)


@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.int8), (np.uint8, np.uint8),
                                           (np.int8, np.int8)])
def test_matmul_integer_to_float(a_type, b_type):
    a, b = q((2, 3, 8), a_type, 1), Const(weights((8, 5), b_type, 2))
    za = zero(7, a_type)
    zb = Const(np.arange(5).astype(b_type))
    inputs = [a, b, scale(0.02), Const((np.arange(5) * 0.001 + 0.01).astype(F32)), za, zb,
              Const(np.arange(5, dtype=F32))]
    got, want = run_both("MatMulIntegerToFloat", inputs)
    assert_same(got, want, 1e-6)


@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_matmul(b_type, per_column):
    a = (np.random.default_rng(1).standard_normal((3, 16)) * 2).astype(F32)
    b = Const(weights((16, 8), b_type, 2))
    b_scale = Const((np.arange(8) * 0.001 + 0.01).astype(F32)) if per_column else scale(0.01)
    b_zero = Const(np.full(8, 3, b_type)) if per_column else zero(3, b_type)
    got, want = run_both("DynamicQuantizeMatMul", [a, b, b_scale, b_zero,
                                                   Const(np.arange(8, dtype=F32))])
    assert_same(got, want, 1e-5)


def test_dynamic_quantize_linear_is_bit_exact():
    """The ONNX op (expanded through its function body) quantises like onnxruntime."""
    x = (np.random.default_rng(4).standard_normal((5, 7)) * 3 + 1).astype(F32)
    got, want = run_both("DynamicQuantizeLinear", [x], n_outputs=3, domain="")
    assert_same(got, want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
@pytest.mark.parametrize("per_axis", [False, True])
def test_microsoft_quantize_dequantize_linear(dtype, per_axis):
    x = (np.random.default_rng(5).standard_normal((2, 3, 4)) * 3).astype(F32)
    if per_axis:
        s, z = Const(np.array([0.02, 0.03, 0.05], F32)), Const(np.array([1, 2, 3], dtype))
    else:
        s, z = scale(0.025), zero(2, dtype)
    got, want = run_both("QuantizeLinear", [x, s, z], axis=1)
    assert_same(got, want)
    got, want = run_both("DequantizeLinear", [want[0], s, z], axis=1)
    assert_same(got, want)


@pytest.mark.parametrize("bits,block,zero_kind", [
    (4, 16, "none"), (4, 16, "packed"), (4, 16, "float"), (4, 32, "none"), (4, 32, "packed"),
    (4, 32, "float"), (8, 16, "none")])
def test_matmul_nbits(bits, block, zero_kind, k=40, atol=2e-5):
    """K = 40 is no whole number of blocks: rows padded, dequantised at import."""
    n_out = 6
    blocks = -(-k // block)
    per_byte = 8 // bits
    g = np.random.default_rng(6)
    packed = g.integers(0, 256, (n_out, blocks, block // per_byte)).astype(np.uint8)
    scales = (g.uniform(0.01, 0.05, n_out * blocks)).astype(F32)
    inputs = [g.standard_normal((3, k)).astype(F32), Const(packed), Const(scales)]
    if zero_kind == "packed":
        row = -(-blocks // per_byte)
        inputs.append(Const(g.integers(0, 256, n_out * row).astype(np.uint8)))
    elif zero_kind == "float":
        inputs.append(Const(g.uniform(0, 2 ** bits, n_out * blocks).astype(F32)))
    got, want = run_both("MatMulNBits", inputs, K=k, N=n_out, bits=bits, block_size=block)
    assert_same(got, want, atol)


@pytest.mark.parametrize("bits,block,zero_kind", [
    (4, 32, "none"), (4, 32, "packed"), (4, 64, "float"), (8, 32, "packed"), (2, 128, "none"),
    (4, 128, "packed")])
def test_matmul_nbits_stays_packed(bits, block, zero_kind):
    """Rows of whole blocks keep their codes: the baked file holds them, not floats. (The
    outputs reach ~80: float32 rounds the codes' scale and bias apart, 1e-6 relative.)"""
    test_matmul_nbits(bits, block, zero_kind, k=256, atol=1e-4)
    n_out, blocks = 6, 256 // block
    packed = Const(np.random.default_rng(7).integers(0, 256, (n_out, blocks, block * bits // 8))
                   .astype(np.uint8))
    model, _ = one_node("MatMulNBits", [np.zeros((3, 256), F32), packed,
                                        Const(np.full(n_out * blocks, 0.02, F32))],
                        K=256, N=n_out, bits=bits, block_size=block)
    graph, bindings = import_onnx(model)
    assert "DequantMatMul" in {node.op.op_name for node in graph.nodes()}
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    stored = sum(node.shape.nbytes for node in file.graph.nodes()
                 if node.op.op_name == "Constant")
    assert stored < 256 * n_out * bits / 8 + 3 * 4 * n_out * blocks + 64


def test_qattention():
    b, s, hidden, heads = 2, 4, 8, 2
    x = q((b, s, hidden), np.uint8, 1)
    w = Const(weights((hidden, 3 * hidden), np.int8, 2))
    bias = Const(np.random.default_rng(3).standard_normal(3 * hidden).astype(F32))
    mask = np.ones((b, s), np.int32)
    mask[1, 2:] = 0
    got, want = run_both("QAttention", [x, w, bias, scale(0.02), scale(0.01), mask,
                                        zero(128), zero(0, np.int8)], num_heads=heads)
    assert_same(got, want, 1e-5)


def _onnxruntime_threads(model, feeds, threads: int) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("direction,batch,per_column,w_type", [
    ("forward", 1, False, np.int8), ("bidirectional", 1, True, np.int8),
    ("reverse", 2, False, np.uint8), ("forward", 3, True, np.int8)])
@pytest.mark.parametrize("seed", [0, 1])
def test_dynamic_quantize_lstm(direction, batch, per_column, w_type, seed):
    """onnxruntime's arithmetic: X (all steps) and H (every step) quantised to uint8, the
    products in integers, scaled, the biases added after. H is quantised per sequence
    where onnxruntime splits the batch across threads, as it does with `batch` threads.
    What is left is onnxruntime's LSTM activations (MLAS's logistic and tanh
    approximations, a few float32 ulps from exact) against numpy's."""
    dirs, hidden, size, seq = (2 if direction == "bidirectional" else 1), 16, 8, 12
    g = np.random.default_rng(seed)
    low = -64 if w_type == np.int8 else 0  # int8 weights: see test_onnxruntime_u8s8_...
    w = g.integers(low, low + 128, (dirs, size, 4 * hidden)).astype(w_type)
    r = g.integers(low, low + 128, (dirs, hidden, 4 * hidden)).astype(w_type)
    shape = (dirs, 4 * hidden) if per_column else (dirs,)
    z = np.full(shape, 0 if w_type == np.int8 else 64, w_type)  # symmetric int8 only
    x = g.standard_normal((seq, batch, size)).astype(F32)
    h0, c0 = (g.standard_normal((2, dirs, batch, hidden)) * 0.5).astype(F32)
    inputs = [x, Const(w), Const(r), Const((g.standard_normal((dirs, 8 * hidden)) * 0.1)
                                            .astype(F32)), None, h0, c0, None,
              Const(g.uniform(0.004, 0.006, shape).astype(F32)), Const(z),
              Const(g.uniform(0.006, 0.008, shape).astype(F32)), Const(z)]
    got, _ = run_both("DynamicQuantizeLSTM", inputs, n_outputs=3, hidden_size=hidden,
                      direction=direction)
    model, feeds = one_node("DynamicQuantizeLSTM", inputs, n_outputs=3, hidden_size=hidden,
                            direction=direction)
    assert_same(got, _onnxruntime_threads(model, feeds, batch), 1e-6)


@pytest.mark.parametrize("form,op_type", [("nbits", "DynamicQuantizeLSTM"),
                                          ("decompress", "LSTM")])
def test_quantized_lstm_exports_for_each_engine(form, op_type):
    """For onnxruntime the op itself (W and R back in its layout); for OpenVINO, which runs
    no com.microsoft ops, an ONNX LSTM on the dequantised weights (within the quantisation
    error)."""
    from rlx.onnx.export import build_onnx

    dirs, hidden, size = 2, 8, 5
    g = np.random.default_rng(3)
    shape = (dirs, 4 * hidden)
    inputs = [g.standard_normal((6, 1, size)).astype(F32),
              Const(weights((dirs, size, 4 * hidden))),
              Const(weights((dirs, hidden, 4 * hidden), seed=1)), None, None, None, None, None,
              Const(g.uniform(0.004, 0.006, shape).astype(F32)), Const(np.zeros(shape, np.int8)),
              Const(g.uniform(0.006, 0.008, shape).astype(F32)), Const(np.zeros(shape, np.int8))]
    model, feeds = one_node("DynamicQuantizeLSTM", inputs, n_outputs=3, hidden_size=hidden,
                            direction="bidirectional")
    want = _onnxruntime_threads(model, feeds, 1)
    graph, bindings = import_onnx(model)
    runtime = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))[0]
    exported = build_onnx(runtime.into_runtime_graph(), packed=form).model
    assert op_type in {node.op_type for node in exported.graph.node}
    got = ort.InferenceSession(exported.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    assert_same(got, want, 0.0 if form == "nbits" else 0.02)


@pytest.mark.parametrize("a_type", TYPES)
@pytest.mark.parametrize("per_channel", [False, True])
def test_onnx_qlinear_conv_and_matmul_are_bit_exact(a_type, per_channel):
    """The ONNX-domain QLinearConv / QLinearMatMul the QOperator variants also hold."""
    za = zero(3 if a_type == np.int8 else 130, a_type)
    zy = zero(5 if a_type == np.int8 else 120, a_type)

    def weight_params(n):
        if per_channel:
            return Const((np.arange(n) * 0.0007 + 0.003).astype(F32)), Const(np.zeros(n,
                                                                                     np.int8))
        return scale(0.004), zero(0, np.int8)

    x = q((1, 8, 9, 9), a_type, 1)
    ws, wz = weight_params(6)
    bias = Const(np.random.default_rng(2).integers(-2000, 2000, 6).astype(np.int32))
    got, want = run_both("QLinearConv", [x, scale(0.021), za, Const(weights((6, 8, 3, 3))),
                                         ws, wz, scale(0.037), zy, bias], domain="",
                         pads=[1, 1, 1, 1])
    assert_same(got, want)
    bs, bz = weight_params(7)
    got, want = run_both("QLinearMatMul", [q((5, 16), a_type, 3), scale(0.021), za,
                                           Const(weights((16, 7), seed=4)), bs, bz,
                                           scale(0.037), zy], domain="")
    assert_same(got, want)


@pytest.mark.parametrize("w_type", [np.uint8, np.int8])
@pytest.mark.parametrize("op", ["MatMulInteger", "ConvInteger"])
def test_onnx_integer_products_are_bit_exact(w_type, op):
    """MatMulInteger / ConvInteger (dynamically quantised models) with zero points."""
    za, zw = zero(119), zero(3 if w_type == np.int8 else 131, w_type)
    if op == "MatMulInteger":
        inputs = [q((2, 5, 16), np.uint8, 1), Const(weights((16, 7), w_type, 2)), za, zw]
        attrs = {}
    else:
        inputs = [q((1, 4, 7, 7), np.uint8, 1), Const(weights((6, 4, 3, 3), w_type, 2)), za, zw]
        attrs = {"pads": [1, 1, 1, 1], "strides": [2, 1]}
    got, want = run_both(op, inputs, domain="", **attrs)
    assert_same(got, want)


def _exported_run(model, feeds) -> list[np.ndarray]:
    """rlx's import and bake of `model`, exported to ONNX and run by onnxruntime."""
    from rlx.onnx.export import build_onnx

    graph, bindings = import_onnx(model)
    runtime = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))[0]
    exported = build_onnx(runtime.into_runtime_graph()).model
    return ort.InferenceSession(exported.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("w_type", [np.uint8, np.int8])
def test_integer_convs_export_to_onnxruntime(w_type):
    """ConvInteger / QLinearConv products below 2^24 are computed in float32 (exact), so
    the exported model runs on onnxruntime, which has no float64 Conv, bit for bit."""
    zw = zero(3 if w_type == np.int8 else 131, w_type)
    x, w = q((1, 4, 7, 7), np.uint8, 1), Const(weights((6, 4, 3, 3), w_type, 2))
    for model, feeds in (
            one_node("ConvInteger", [x, w, zero(119), zw], domain="", pads=[1, 1, 1, 1]),
            one_node("QLinearConv", [x, scale(0.021), zero(119), w, scale(0.004), zw,
                                     scale(0.037), zero(120)], domain="", pads=[1, 1, 1, 1])):
        want = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)
        assert_same(_exported_run(model, feeds), want)


def test_conv_integer_past_float32_is_sliced_exactly():
    """288 products of 255 x 255 sum past 2^24, where one float32 Conv would round: rlx
    and its export to onnxruntime sum float32 Convs over slices of the channels in
    float64, and give the exact integer."""
    x = np.full((1, 32, 3, 3), 255, np.uint8)
    w = np.full((1, 32, 3, 3), 255, np.uint8)
    w[0, 0, 0, 0] = 254  # an odd sum, which float32 cannot hold above 2^24
    exact = int((x.astype(np.int64) * w).sum())
    assert exact > 2 ** 24 and exact % 2
    model, feeds = one_node("ConvInteger", [x, Const(w)], domain="")
    got, _ = run_both("ConvInteger", [x, Const(w)], domain="")
    for result in (got, _exported_run(model, feeds)):
        assert result[0].reshape(-1).tolist() == [exact]
