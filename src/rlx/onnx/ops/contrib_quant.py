"""onnxruntime's quantised `com.microsoft` ops, in IR integer and float32 arithmetic.

Written by onnxruntime's quantizer (`quantize_static` in the QOperator format,
`quantize_dynamic`, the 4-bit `MatMulNBits` tools). The arithmetic follows onnxruntime's CPU
kernels (MLAS), so results match bit for bit: integer products and sums are exact in int32;
requantisation is `float32(acc) * float32 multiplier`, rounded half to even, plus the zero
point, saturated; element-wise ops (Mul, Sigmoid, LeakyRelu, Concat) dequantise to
float32, compute, and quantise `round(y / scale) + zero`, as onnxruntime's lookup tables do;
where the scales and zero points are constants, that table is computed at import and the body
reads it (a Gather: no engine can rewrite its arithmetic). Add's fused multiply-adds
(`mlas_add`) and AveragePool's division by y_scale (`division_thresholds`) are read from
tables too.

The QOperator ops (QLinearAdd ... QGemm) and quantize_dynamic's fused ones
(MatMulIntegerToFloat, DynamicQuantizeMatMul, QAttention) are kept whole
(`rlx.onnx.composite`): that arithmetic is their body, and the export gives onnxruntime the
node itself. DynamicQuantizeLSTM is not: its IR op (`QuantizedLSTM`) exports as itself.
"""

from __future__ import annotations

import math

import numpy as np

from rlx.codecs.encodings import Encoding
from rlx.codecs.mlx import AFFINE_GROUPS
from rlx.ir import (
    Activation,
    Clamp,
    CompareOp,
    CumSum,
    DequantMatMul,
    DType,
    DynamicQuantizeLinear,
    PoolKind,
    QuantizedLSTM,
    ReduceOp,
)
from rlx.onnx.composite import kept_whole
from rlx.onnx.fold import evaluated
from rlx.onnx.node import NodeContext
from rlx.onnx.ops.contrib_fused import attend
from rlx.onnx.ops.control import recurrent, recurrent_lstm
from rlx.onnx.ops.division_thresholds import division_thresholds
from rlx.onnx.ops.mlas_add import add_tables
from rlx.onnx.ops.nn import _pool
from rlx.onnx.ops.quant import (
    centred,
    dequantize,
    dequantize_linear,
    integer_matmul,
    quantize,
    quantize_linear,
)
from rlx.onnx.registry import MICROSOFT, converter

__all__ = ["requantize"]

F32 = DType.F32

converter("QuantizeLinear", domain=MICROSOFT)(quantize_linear)
converter("DequantizeLinear", domain=MICROSOFT)(dequantize_linear)


def _f32(s, x: int) -> int:
    return s.cast(x, F32)


def _zero(n: NodeContext, i: int) -> int | None:
    return n.optional(i)


def _out_type(n: NodeContext, zero_index: int, like: int) -> DType:
    return n.s.dtype(n.input(zero_index)) if n.has(zero_index) else n.s.dtype(like)


def _centred(n: NodeContext, x: int, zero: int | None, dtype: DType = F32) -> int:
    """x - zero point, in `dtype` (exact: 8-bit values and their differences fit)."""
    return centred(n.s, x, zero, dtype)


def requantize(s, value: int, multiplier: int | None, zero: int | None, out: DType) -> int:
    """saturate(round(float32(value) * multiplier) + zero) in `out` (MLAS's requantise)."""
    y = _f32(s, value)
    if multiplier is not None:
        y = s.mul(y, multiplier)
    y = s.unary(Activation.ROUND, y)
    if zero is not None:
        y = s.add(y, _f32(s, zero))
    info = np.iinfo(out.numpy)
    return s.cast(s.emit(Clamp(float(info.min), float(info.max)), y), out)


# -- element-wise ------------------------------------------------------------------------------
@converter("QLinearAdd", domain=MICROSOFT)
@kept_whole
def qlinear_add(n: NodeContext) -> int:
    """C = round(sa/sc (A - za) + sb/sc (B - zb)) + zc, read from tables of onnxruntime's
    fused arithmetic (`rlx.onnx.ops.mlas_add`) where the scales and zero points are
    constants; else computed in float32 (a step off onnxruntime on some rounding ties)."""
    s = n.s
    out = _out_type(n, 7, n.input(0))
    tabled = _tabulated_add(n, out)
    if tabled is not None:
        return tabled
    sc = _f32(s, n.input(6))
    ra, rb = s.div(_f32(s, n.input(1)), sc), s.div(_f32(s, n.input(4)), sc)
    a = s.mul(_centred(n, n.input(0), _zero(n, 2)), ra)
    b = s.mul(_centred(n, n.input(3), _zero(n, 5)), rb)
    return requantize(s, s.add(a, b), None, _zero(n, 7), out)


def _tabulated_add(n: NodeContext, out: DType) -> int | None:
    """C from `add_tables` for 8-bit A and B with constant parameters, else None. The
    kernel's operand order is (B, A) when A is broadcast along the innermost dimension."""
    s = n.s
    a, b = n.input(0), n.input(3)
    if s.dtype(a) not in _CODES or s.dtype(b) != s.dtype(a) or out != s.dtype(a):
        return None
    params = [_one_value(n, i) for i in range(1, 8) if i != 3]
    if any(v is None for v in params):
        return None
    sa, za, sb, zb, sc, zc = params
    ra, rb = np.float32(sa) / np.float32(sc), np.float32(sb) / np.float32(sc)
    order = [(a, ra, za), (b, rb, zb)]
    if _broadcast_innermost(s.shape(a).dims, s.shape(b).dims):
        order.reverse()
    (p, rp, zp), (q, rq, zq) = order
    low = int(np.iinfo(out.numpy).min)
    codes = np.arange(low, low + 256).astype(out.numpy)
    tables = [s.const(t) for t in add_tables(codes, rp, zp, rq, zq, zc)]
    ip, iq = _code_index(s, p), _code_index(s, q)
    if len(tables) == 1:  # C for every pair
        pair = s.add(s.mul(ip, s.scalar(256, DType.I32)), iq)
        return s.gather(tables[0], pair)
    high_p, low_p, high_q, low_q = tables
    high = s.add(s.gather(high_p, ip), s.gather(high_q, iq))
    y = s.add(high, s.add(s.gather(low_p, ip), s.gather(low_q, iq)))
    return requantize(s, y, None, None, out)


def _one_value(n: NodeContext, i: int) -> float | int | None:
    """Input `i`'s one value when known at import (an omitted zero point is 0)."""
    if not n.has(i):
        return 0
    value = n.s.value(n.input(i))
    return None if value is None or value.size != 1 else value.reshape(()).item()


def _broadcast_innermost(a: tuple, b: tuple) -> bool:
    """Whether onnxruntime takes A as the scalar of each span: A has one element, or B does
    not and A is 1 along the innermost dimension where the output is not (a symbolic
    dimension counts as not broadcast)."""
    def count(dims):
        return math.prod(dims) if all(isinstance(d, int) for d in dims) else None

    if count(a) == 1:
        return True
    if count(b) == 1:
        return False
    for da, db in zip(reversed((1,) * (len(b) - len(a)) + tuple(a)),
                      reversed((1,) * (len(a) - len(b)) + tuple(b))):
        if da == 1 and db == 1:
            continue
        return da == 1
    return False


@converter("QLinearMul", domain=MICROSOFT)
@kept_whole
def qlinear_mul(n: NodeContext) -> int:
    """C = round((A - za)(B - zb) * (sa sb / sc)) + zc."""
    s = n.s
    ratio = s.div(s.mul(_f32(s, n.input(1)), _f32(s, n.input(4))), _f32(s, n.input(6)))
    product = s.mul(_centred(n, n.input(0), _zero(n, 2)), _centred(n, n.input(3), _zero(n, 5)))
    return requantize(s, product, ratio, _zero(n, 7), _out_type(n, 7, n.input(0)))


def _through_float(n: NodeContext, fn) -> int:
    """Dequantise X (inputs 0..2), apply `fn` in float32, quantise to Y (inputs 3, 4): what
    onnxruntime's 256-entry lookup table holds for each input value."""
    s = n.s
    out = _out_type(n, 4, n.input(0))
    return _tabulated(s, n.input(0), lambda x: quantize(
        s, fn(dequantize(s, x, _f32(s, n.input(1)), _zero(n, 2), F32)), n.input(3),
        _zero(n, 4), out))


_CODES = (DType.U8, DType.I8)


def _tabulated(s, x: int, compute) -> int:
    """`compute(x)` for 8-bit codes x read from a table of its 256 values, computed now by
    the kernels when it depends on constants only (else `compute(x)` itself). Why: an
    engine may rewrite the float arithmetic (OpenVINO multiplies by a constant scale's
    reciprocal where the body divides, which moves values on rounding ties)."""
    dtype = s.dtype(x)
    if dtype in _CODES:
        low = int(np.iinfo(dtype.numpy).min)
        codes = s.const(np.arange(low, low + 256).astype(dtype.numpy))
        table = evaluated(s.graph, compute(codes))
        if table is not None:
            return s.gather(s.const(table), _code_index(s, x))
    return compute(x)


def _code_index(s, x: int) -> int:
    """An 8-bit code's place in a table of all 256 codes, lowest first, as int32."""
    index = s.cast(x, DType.I32)
    low = int(np.iinfo(s.dtype(x).numpy).min)
    return s.sub(index, s.scalar(low, DType.I32)) if low else index


@converter("QLinearSigmoid", domain=MICROSOFT)
@kept_whole
def qlinear_sigmoid(n: NodeContext) -> int:
    return _through_float(n, lambda x: n.s.unary(Activation.SIGMOID, x))


@converter("QLinearLeakyRelu", domain=MICROSOFT)
@kept_whole
def qlinear_leaky_relu(n: NodeContext) -> int:
    alpha = float(n.attr("alpha", 0.01))
    return _through_float(n, lambda x: n.s.unary(Activation.LEAKY_RELU, x, alpha))


@converter("QLinearConcat", domain=MICROSOFT)
@kept_whole
def qlinear_concat(n: NodeContext) -> int:
    """Inputs Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per tensor; each
    is requantised to Y's parameters (copied as is where they are Y's) and concatenated."""
    s = n.s
    y_scale, y_zero = n.input(0), n.input(1)
    out = s.dtype(y_zero)
    parts = []
    for i in range(2, len(n.inputs), 3):
        x = n.input(i)
        if _same_values(s, (n.input(i + 1), y_scale), (n.input(i + 2), y_zero)):
            parts.append(x)
            continue
        x_scale, x_zero = _f32(s, n.input(i + 1)), n.input(i + 2)
        parts.append(_tabulated(s, x, lambda v, x_scale=x_scale, x_zero=x_zero: quantize(
            s, dequantize(s, v, x_scale, x_zero, F32), y_scale, y_zero, out)))
    return s.concat(parts, n.attr("axis"))


def _same_values(s, *pairs: tuple[int, int]) -> bool:
    """Whether each pair of nodes holds the same constant values."""
    for a, b in pairs:
        va, vb = s.value(a), s.value(b)
        if va is None or vb is None or not np.array_equal(va, vb):
            return False
    return True


# -- pooling and softmax -----------------------------------------------------------------------
def _to_channels_first(n: NodeContext, x: int) -> int:
    if not n.attr("channels_last", 0):
        return x
    rank = n.s.rank(x)
    return n.s.transpose(x, (0, rank - 1, *range(1, rank - 1)))


def _to_channels_last(n: NodeContext, y: int) -> int:
    if not n.attr("channels_last", 0):
        return y
    rank = n.s.rank(y)
    return n.s.transpose(y, (0, *range(2, rank), 1))


@converter("QLinearGlobalAveragePool", domain=MICROSOFT)
@kept_whole
def qlinear_global_average_pool(n: NodeContext) -> int:
    """round((sum(X) - zx * count) * (sx / sy / count)) + zy: an exact integer sum."""
    s = n.s
    x = _to_channels_first(n, n.input(0))
    axes = tuple(range(2, s.rank(x)))
    dims = s.shape(x).dims[2:]
    if all(isinstance(d, int) for d in dims):
        count = s.scalar(float(math.prod(int(d) for d in dims)), F32)
    else:  # the window is the whole image: its size is known at run time
        count = _f32(s, s.reduce(ReduceOp.PROD, s.shape_of(x, 2), None, keepdims=False))
    total = s.reduce(ReduceOp.SUM, _centred(n, x, _zero(n, 2), DType.I32), axes)
    ratio = s.div(s.div(_f32(s, n.input(1)), _f32(s, n.input(3))), count)
    y = requantize(s, total, ratio, _zero(n, 4), _out_type(n, 4, n.input(0)))
    return _to_channels_last(n, y)


@converter("QLinearAveragePool", domain=MICROSOFT)
@kept_whole
def qlinear_average_pool(n: NodeContext) -> int:
    """AveragePool of the dequantised input in float32, quantised to Y as onnxruntime's
    pool does: round(avg / y_scale + y_zero), the zero point added before rounding; read
    from thresholds (`division_thresholds`) where Y's parameters are constants."""
    s = n.s
    x = _to_channels_first(n, n.input(0))
    real = dequantize(s, x, _f32(s, n.input(1)), _zero(n, 2), F32)
    average = _pool(n, PoolKind.AVG, real)
    out = _out_type(n, 4, n.input(0))
    y = _divided_by_thresholds(n, average, out)
    if y is None:
        y = s.div(average, _f32(s, n.input(3)))
        if n.has(4):  # onnxruntime's pool adds the zero point before it rounds
            y = s.add(y, _f32(s, n.input(4)))
        info = np.iinfo(out.numpy)
        y = s.cast(s.emit(Clamp(float(info.min), float(info.max)),
                          s.unary(Activation.ROUND, y)), out)
    return _to_channels_last(n, y)


def _divided_by_thresholds(n: NodeContext, x: int, out: DType) -> int | None:
    """saturate(rint(x / y_scale + y_zero)) (inputs 3, 4) for constant parameters: a code
    within a step from the reciprocal's product, corrected by comparing x with the
    thresholds of its two neighbours (exact on any engine), else None."""
    s = n.s
    scale, zero = _one_value(n, 3), _one_value(n, 4)
    if scale is None or zero is None or out not in _CODES:
        return None
    thresholds = s.const(division_thresholds(scale, zero, out.numpy))
    reciprocal = s.scalar(np.float32(1.0) / np.float32(scale), F32)
    near = _code_index(s, requantize(s, x, reciprocal, _zero(n, 4), out))
    above = s.gather(thresholds, s.add(near, s.scalar(1, DType.I32)))
    index = s.add(near, s.cast(s.compare(CompareOp.GE, x, above), DType.I32))
    index = s.sub(index, s.cast(s.compare(CompareOp.LT, x, s.gather(thresholds, near)),
                                DType.I32))
    low = int(np.iinfo(out.numpy).min)
    return s.cast(s.add(index, s.scalar(low, DType.I32)) if low else index, out)


@converter("QLinearSoftmax", domain=MICROSOFT)
@kept_whole
def qlinear_softmax(n: NodeContext) -> int:
    """Softmax of X along `axis` (the whole trailing block before opset 13), quantised to
    Y, in onnxruntime's arithmetic: each value reads the entry 255 - (row max - value) of
    a table of exponentials (X's zero point cancels), the row's entries are summed in
    order in float32, and Y = saturate(round(entry * floor(1 / y_scale) / sum) + y_zero)."""
    s = n.s
    x = n.input(0)
    opset = int(n.attr("opset", 13))
    rank = s.rank(x)
    axis = n.attr("axis", -1 if opset >= 13 else 1) % max(rank, 1)
    shape = None
    if opset < 13 and axis < rank - 1:
        x, shape = s.to_2d(x, axis)
        axis = 1
    # the index in float32, exact for 8-bit codes: OpenVINO 2026.4 miscomputes an int32
    # ReduceMax followed by a Sub on inputs of 128 rows or more (right in float32)
    values = s.cast(x, F32)
    offset = s.sub(s.reduce(ReduceOp.MAX, values, (axis,)), s.scalar(255.0, F32))
    index = s.cast(s.sub(values, offset), DType.I32)
    entries = s.gather(_softmax_table(n, x, axis), index)
    total = s.slice(s.emit(CumSum(axis), entries), [-1], [_END], [axis])
    steps = s.unary(Activation.FLOOR, s.div(s.scalar(1.0, F32), _f32(s, n.input(3))))
    y = requantize(s, s.div(s.mul(entries, steps), total), None, _zero(n, 4),
                   _out_type(n, 4, x))
    return y if shape is None else s.reshape(y, shape)


_END = np.iinfo(np.int64).max
_FLOAT_MAX = float(np.finfo(np.float32).max)


def _softmax_table(n: NodeContext, x: int, axis: int) -> int:
    """onnxruntime's 256 float32 exponentials: entry i = exp((i - 255 + shift) * x_scale)
    in float64, `shift` scaling them up as far as a row of x's length along `axis` can sum
    without overflowing float32, less a margin of e^5 (a constant once folded)."""
    s = n.s
    x_scale = s.cast(s.reshape(n.input(1), ()), DType.F64)
    length = s.cast(s.dim(x, axis), F32)
    headroom = s.cast(s.div(s.scalar(_FLOAT_MAX, F32), length), DType.F64)
    shift = s.emit(Clamp(0.0, None), s.sub(s.unary(Activation.LOG, headroom),
                                           s.scalar(5.0, DType.F64)))
    steps = s.add(s.const(np.arange(256, dtype=np.float64) - 255), s.div(shift, x_scale))
    table = s.cast(s.unary(Activation.EXP, s.mul(steps, x_scale)), F32)
    known = evaluated(s.graph, table)  # in float64 here; an engine may compute it in float32
    return table if known is None else s.const(known)


# -- matrix products ---------------------------------------------------------------------------
def _integer_product(n: NodeContext, a: int, za: int | None, b: int, zb: int | None,
                     trans_a: bool = False, trans_b: bool = False) -> int:
    """(A - za) @ (B - zb) in int32 (MatMulInteger, B kept 8-bit); zb per column (a vector
    along N) or per tensor."""
    s = n.s
    if trans_a:
        a = s.transpose(a, (1, 0))
    if trans_b:
        b = s.transpose(b, (1, 0))
    return integer_matmul(n, a, b, za, zb)


@converter("QGemm", domain=MICROSOFT)
@kept_whole
def qgemm(n: NodeContext) -> int:
    """alpha (A - za)(B - zb) + C (int32, at scale sa sb): float32 out, or quantised with
    y_scale / y_zero_point (inputs 7, 8)."""
    s = n.s
    acc = _integer_product(n, n.input(0), _zero(n, 2), n.input(3), _zero(n, 5),
                           bool(n.attr("transA", 0)), bool(n.attr("transB", 0)))
    if n.has(6):
        acc = s.add(acc, s.cast(n.input(6), DType.I32))
    scale = s.mul(_f32(s, n.input(1)), _f32(s, n.input(4)))
    alpha = float(n.attr("alpha", 1.0))
    if alpha != 1.0:
        scale = s.mul(scale, s.scalar(alpha, F32))
    if not n.has(7):
        return s.mul(_f32(s, acc), scale)
    multiplier = s.div(scale, _f32(s, n.input(7)))
    return requantize(s, acc, multiplier, _zero(n, 8), _out_type(n, 8, n.input(0)))


def _scaled_output(n: NodeContext, acc: int, scale: int, bias: int | None) -> int:
    s = n.s
    y = s.mul(_f32(s, acc), scale)
    return y if bias is None else s.add(y, bias)


@converter("MatMulIntegerToFloat", domain=MICROSOFT)
@kept_whole
def matmul_integer_to_float(n: NodeContext) -> int:
    """float32(MatMulInteger(A, B)) * (a_scale * b_scale) + bias; inputs A, B, a_scale,
    b_scale, a_zero_point, b_zero_point, bias."""
    s = n.s
    acc = _integer_product(n, n.input(0), _zero(n, 4), n.input(1), _zero(n, 5))
    scale = s.mul(_f32(s, n.input(2)), _f32(s, n.input(3)))
    return _scaled_output(n, acc, scale, n.optional(6))


@converter("DynamicQuantizeMatMul", domain=MICROSOFT)
@kept_whole
def dynamic_quantize_matmul(n: NodeContext) -> int:
    """A quantised to uint8 on the fly, then MatMulIntegerToFloat with B (inputs A, B,
    b_scale, b_zero_point, bias)."""
    s = n.s
    qa, a_scale, a_zero = s.parts(s.emit(DynamicQuantizeLinear(), _f32(s, n.input(0))))
    acc = _integer_product(n, qa, a_zero, n.input(1), _zero(n, 3))
    return _scaled_output(n, acc, s.mul(a_scale, _f32(s, n.input(2))), n.optional(4))


@converter("MatMulNBits", domain=MICROSOFT)
def matmul_nbits(n: NodeContext) -> int:
    """A @ dequant(B)^T: B [N, blocks, block_size * bits / 8] packs `bits`-bit values low
    bits first, each block with a scale and a zero point (packed like B, default
    2^(bits-1)); optional bias (input 5). B stays packed (`_packed_matmul`) where its rows
    are whole blocks of 32, 64 or 128."""
    s = n.s
    bits, block = int(n.attr("bits", 4)), int(n.attr("block_size"))
    k, cols = int(n.attr("K")), int(n.attr("N"))
    if bits not in (2, 4, 8) or n.has(4):  # (g_idx: a permuted K order)
        raise n.fail(f"bits={bits}{' with g_idx' if n.has(4) else ''} is not supported")
    packed = n.static(1)
    if packed is None:
        raise n.fail("the packed weight B must be a constant")
    blocks = -(-k // block)
    values = _unpack(packed, bits).reshape(cols, blocks, block).astype(np.float32)
    scales = s.reshape(_f32(s, n.input(2)), (cols, blocks, 1))
    if not n.has(3):
        zero = s.const(np.full((cols, blocks, 1), 1 << (bits - 1), np.float32))
    elif n.s.dtype(n.input(3)) == DType.U8:  # packed like B, a row padded to whole bytes
        zero_value = n.static(3)
        if zero_value is None:
            raise n.fail("packed zero_points must be a constant")
        unpacked = _unpack(zero_value, bits).reshape(cols, -1)[:, :blocks]
        zero = s.const(unpacked.astype(np.float32).reshape(cols, blocks, 1))
    else:  # float zero points, in the scales' type
        zero = s.reshape(_f32(s, n.input(3)), (cols, blocks, 1))
    x = _f32(s, n.input(0))
    if block in AFFINE_GROUPS and k % block == 0:
        y = _packed_matmul(n, x, packed, scales, zero, bits, block)
    else:  # rows padded to whole blocks: dequantised at import
        real = s.mul(s.sub(s.const(values), zero), scales)
        real = s.slice(s.reshape(real, (cols, blocks * block)), [0], [k], [1])
        y = s.matmul(x, s.transpose(real, (1, 0)))
    return s.add(y, n.input(5)) if n.has(5) else y


def _packed_matmul(n: NodeContext, x: int, packed: np.ndarray, scales: int, zero: int,
                   bits: int, block: int) -> int:
    """x @ W^T with W kept in its `bits`-bit codes: MatMulNBits' stream (values low bits
    first, row by row) is MLX's affine codes stream, and (code - zero) * scale is MLX's
    scale * code + bias with bias = -zero * scale."""
    s = n.s
    cols, blocks = int(n.attr("N")), int(n.attr("K")) // block
    bias = s.mul(s.sub(s.scalar(0.0, F32), zero), scales)
    scheme = Encoding.parse(f"mlx_affine/{bits}/{block}")
    return s.emit(DequantMatMul(scheme, cols), x, s.const(packed.reshape(-1)),
                  s.reshape(scales, (cols, blocks)), s.reshape(bias, (cols, blocks)))


def _unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """Each byte's `8 / bits` values, low bits first, on a new last axis."""
    mask = (1 << bits) - 1
    return np.stack([(packed >> (bits * j)) & mask for j in range(8 // bits)], -1)


@converter("QAttention", domain=MICROSOFT)
@kept_whole
def qattention(n: NodeContext):
    """Attention whose projection is quantised: inputs input (u8/i8), weight, bias (float),
    input_scale, weight_scale, mask_index, input_zero_point, weight_zero_point, past."""
    from rlx.onnx.ops.contrib_fused import additive_mask, split_qkv

    s = n.s
    if n.has(8):
        raise n.fail("past state (input 8) is not supported")
    acc = _integer_product(n, n.input(0), _zero(n, 6), n.input(1), _zero(n, 7))
    qkv = _scaled_output(n, acc, s.mul(_f32(s, n.input(3)), _f32(s, n.input(4))),
                         n.input(2))
    q, k, v = split_qkv(n, qkv, s.shape(n.input(1)).dims[-1])
    bias = additive_mask(n, n.input(5), F32, k) if n.has(5) else None
    out = attend(n, q, k, v, n.attr("num_heads"), bias, bool(n.attr("unidirectional", 0)))
    if n.wants(1):
        raise n.fail("output 1 (present state) is not supported")
    return [out]


@converter("DynamicQuantizeLSTM", domain=MICROSOFT)
def dynamic_quantize_lstm(n: NodeContext):
    """An LSTM whose W [D, I, 4H] and R [D, H, 4H] are int8/uint8 with per-direction or
    per-column scales and zero points (inputs 8..11), transposed against ONNX's layout.

    rlx computes what onnxruntime's kernel does (`QuantizedLSTM`: X and H quantised to
    uint8 on the fly, integer products); with peepholes or input_forget, which that path
    leaves out, the LSTM runs in float32 on the dequantised weights."""
    s = n.s
    if n.has(7) or n.attr("input_forget", 0):
        return recurrent_lstm(n, {1: _dequantized_weight(n, 1, 8, 9),
                                  2: _dequantized_weight(n, 2, 10, 11)})
    onnx_layout = {i: s.transpose(n.input(i), (0, 2, 1)) for i in (1, 2)}
    return recurrent(n, QuantizedLSTM, QuantizedLSTM.optional_inputs, {}, onnx_layout)


def _dequantized_weight(n: NodeContext, index: int, scale: int, zero: int) -> int:
    """Weight `index` in float32 and ONNX's layout; per direction [D] or per column [D, 4H]
    parameters broadcast over [D, rows, 4H]."""
    s = n.s
    shape = (-1, 1, 1) if s.rank(n.input(scale)) == 1 else (0, 1, -1)
    real = dequantize(s, n.input(index), s.reshape(_f32(s, n.input(scale)), shape),
                      s.reshape(n.input(zero), shape), F32)
    return s.transpose(real, (0, 2, 1))
