"""One ONNX writer per rlx op type (`HANDLERS`), for `rlx.onnx.export`.

Each handler gets a `_Call` (the rlx node, its input names, the output names to produce)
and writes one ONNX node or a short chain of standard ones. Static operands (a Reshape's
shape, Slice bounds, pads) become small int64 initializers; dynamic ones are the node's
extra inputs, cast to int64 where ONNX wants it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from onnx import TensorProto

from rlx.codecs import decode_rows
from rlx.errors import ExportError
from rlx.ir.dtype import DType
from rlx.ir.ops import (
    blocks,
    channelwise,
    dequant,
    einsum,
    generators,
    indexing,
    linalg,
    logic,
    nn,
    reduce,
    resize,
    shaping,
    slicing,
    spectral,
    windows,
)
from rlx.ir.ops import control as ctl
from rlx.ir.ops import elementwise as ew
from rlx.ir.ops import packed as packed_ops
from rlx.ir.ops import quant as quant_ops
from rlx.ir.ops.elementwise import Activation as A
from rlx.ir.ops.elementwise import BinaryOp as B
from rlx.kernels.quant import dense_weight
from rlx.onnx import export_quant as quant
from rlx.onnx.export_quant import PackedForm

__all__ = ["HANDLERS"]

HANDLERS: dict[type, Callable] = {}


def handles(*op_types: type):
    def register(fn):
        for t in op_types:
            HANDLERS[t] = fn
        return fn

    return register


# -- elementwise -------------------------------------------------------------------------------
_UNARY = {
    A.RELU: "Relu", A.SIGMOID: "Sigmoid", A.TANH: "Tanh", A.EXP: "Exp", A.LOG: "Log",
    A.SQRT: "Sqrt", A.NEG: "Neg", A.ABS: "Abs", A.SIN: "Sin", A.COS: "Cos", A.TAN: "Tan",
    A.ASIN: "Asin", A.ACOS: "Acos", A.ATAN: "Atan", A.SINH: "Sinh", A.COSH: "Cosh",
    A.ASINH: "Asinh", A.ACOSH: "Acosh", A.ATANH: "Atanh", A.RECIP: "Reciprocal",
    A.ROUND: "Round", A.FLOOR: "Floor", A.CEIL: "Ceil", A.SIGN: "Sign", A.SOFTPLUS: "Softplus",
    A.SOFTSIGN: "Softsign", A.ERF: "Erf", A.HARD_SWISH: "HardSwish", A.MISH: "Mish",
    A.IS_NAN: "IsNaN", A.BIT_NOT: "BitwiseNot",
}
_ALPHA = {A.ELU: ("Elu", 1.0), A.CELU: ("Celu", 1.0), A.LEAKY_RELU: ("LeakyRelu", 0.01),
          A.THRESHOLDED_RELU: ("ThresholdedRelu", 1.0)}


def _or(value, default):
    return default if value is None else float(value)


@handles(ew.Unary)
def _unary(c) -> None:
    k, x = c.op.kind, c.x[0]
    if k in _UNARY:
        c.final(_UNARY[k], [x])
    elif k in _ALPHA:
        op_type, default = _ALPHA[k]
        c.final(op_type, [x], alpha=_or(c.op.alpha, default))
    elif k is A.SELU:
        c.final("Selu", [x], alpha=_or(c.op.alpha, 1.67326319217681884765625),
                gamma=_or(c.op.beta, 1.05070102214813232421875))
    elif k is A.HARD_SIGMOID:
        c.final("HardSigmoid", [x], alpha=_or(c.op.alpha, 0.2), beta=_or(c.op.beta, 0.5))
    elif k in (A.GELU, A.GELU_APPROX):
        c.final("Gelu", [x], approximate="tanh" if k is A.GELU_APPROX else "none")
    elif k is A.SILU:
        c.final("Mul", [x, c.tmp("Sigmoid", [x])])
    elif k is A.RSQRT:
        c.final("Reciprocal", [c.tmp("Sqrt", [x])])
    elif k is A.LOG_SIGMOID:
        c.final("Neg", [c.tmp("Softplus", [c.tmp("Neg", [x])])])
    elif k is A.IS_INF:
        c.final("IsInf", [x])
    elif k is A.IS_POS_INF:
        c.final("IsInf", [x], detect_negative=0)
    elif k is A.IS_NEG_INF:
        c.final("IsInf", [x], detect_positive=0)
    else:  # pragma: no cover - every Activation is listed above
        raise ExportError(f"{c.node.label}: no ONNX form for {k.value}")


_BINARY = {B.ADD: "Add", B.SUB: "Sub", B.MUL: "Mul", B.DIV: "Div", B.MAX: "Max", B.MIN: "Min",
           B.POW: "Pow", B.BIT_AND: "BitwiseAnd", B.BIT_OR: "BitwiseOr",
           B.BIT_XOR: "BitwiseXor"}


@handles(ew.Binary)
def _binary(c) -> None:
    op, (a, b) = c.op.op, c.x
    dtype = c.out_shape.dtype
    if op in _BINARY:
        c.final(_BINARY[op], [a, b])
    elif op is B.FMOD:
        c.final("Mod", [a, b], fmod=1)
    elif op is B.MOD and not dtype.is_float:
        c.final("Mod", [a, b], fmod=0)
    elif op is B.MOD:  # floats: a - floor(a / b) * b (ONNX Mod needs fmod=1 for floats)
        c.final("Sub", [a, c.tmp("Mul", [c.tmp("Floor", [c.tmp("Div", [a, b])]), b])])
    elif op in (B.SHL, B.SHR):
        c.final("BitShift", [a, b], direction="LEFT" if op is B.SHL else "RIGHT")
    elif op is B.ATAN2:
        _atan2(c, a, b, dtype)
    else:  # pragma: no cover
        raise ExportError(f"{c.node.label}: no ONNX form for {op.value}")


def _atan2(c, y: str, x: str, dtype: DType) -> None:
    """atan(y / x), moved by +-pi where x < 0, and +-pi/2 where x == 0."""
    zero, pi = c.scalar(0, dtype), c.scalar(math.pi, dtype)
    half = c.scalar(math.pi / 2, dtype)
    base = c.tmp("Atan", [c.tmp("Div", [y, x])])
    y_neg = c.tmp("Less", [y, zero])
    shift = c.tmp("Where", [y_neg, c.tmp("Neg", [pi]), pi])
    left = c.tmp("Where", [c.tmp("Less", [x, zero]), c.tmp("Add", [base, shift]), base])
    axis = c.tmp("Mul", [c.tmp("Sign", [y]), half])
    c.final("Where", [c.tmp("Equal", [x, zero]), axis, left])


_COMPARE = {logic.CompareOp.EQ: "Equal", logic.CompareOp.LT: "Less",
            logic.CompareOp.LE: "LessOrEqual",
            logic.CompareOp.GT: "Greater", logic.CompareOp.GE: "GreaterOrEqual"}


@handles(logic.Compare)
def _compare(c) -> None:
    if c.op.op is logic.CompareOp.NE:
        c.final("Not", [c.tmp("Equal", c.x)])
    else:
        c.final(_COMPARE[c.op.op], c.x)


@handles(logic.Logical)
def _logical(c) -> None:
    c.final({"and": "And", "or": "Or", "xor": "Xor"}[c.op.op.value], c.x)


def _simple(op_type: str):
    def handler(c) -> None:
        c.final(op_type, c.x)

    return handler


for _type, _name in ((logic.Not, "Not"), (logic.Where, "Where"), (ew.Identity, "Identity"),
                     (linalg.MatMul, "MatMul"), (channelwise.PRelu, "PRelu"),
                     (indexing.NonZero, "NonZero"), (generators.Size, "Size"),
                     (generators.Range, "Range")):
    handles(_type)(_simple(_name))


@handles(ew.Cast)
def _cast(c) -> None:
    if c.op.bits:
        raise ExportError(f"{c.node.label}: a bit cast has no ONNX op before opset 26")
    from rlx.onnx.export import onnx_dtype

    c.final("Cast", c.x, to=onnx_dtype(c.op.to))


@handles(ew.Clamp)
def _clamp(c) -> None:
    dtype = c.shape().dtype
    lo = "" if c.op.min is None else c.scalar(c.op.min, dtype)
    hi = "" if c.op.max is None else c.scalar(c.op.max, dtype)
    c.final("Clip", [c.x[0], lo, hi])


# -- linear algebra ----------------------------------------------------------------------------
@handles(einsum.Einsum)
def _einsum(c) -> None:
    c.final("Einsum", c.x, equation=c.op.equation)


@handles(spectral.DFT)
def _dft(c) -> None:
    """Products with float64 cosine/sine tables along the moved-last axis, as the importer
    lowers a DFT of run-time length (onnxruntime's own DFT is up to 2.4e-4 off the node
    suite's expected values, where these products are within float32 rounding)."""
    from rlx.onnx.export import onnx_dtype
    from rlx.onnx.ops.signal import Kind, dft_tables

    op, shape = c.op, c.shape(0)
    rank = shape.rank
    axis = op.axis % rank
    width, size = shape.dims[-1], shape.dims[axis]
    if not isinstance(width, int) or not isinstance(size, int):
        raise ExportError(f"{c.node.label}: the signal's dims must be static, got {shape}")
    kind = Kind.IRFFT if op.inverse and op.onesided else \
        Kind.INVERSE if op.inverse else Kind.FORWARD
    n = op.length
    rows = min(size, n // 2 + 1 if kind is Kind.IRFFT else n)
    count = n // 2 + 1 if op.onesided and not op.inverse else n
    cos, sin = dft_tables(rows, count, n, kind)
    sign = -1 if kind is Kind.FORWARD else 1
    perm = [a for a in range(rank - 1) if a != axis] + [axis, rank - 1]
    moved = c.tmp("Transpose", [c.tmp("Cast", [c.x[0]], to=TensorProto.DOUBLE)], perm=perm)

    def part(i: int) -> str:  # the real (0) or imaginary (1) part, cropped to `rows`
        p = c.tmp("Gather", [moved, c.scalar(i, DType.I64)], axis=-1)
        return p if rows == size else c.tmp("Slice", [p, c.ints([0]), c.ints([rows]),
                                                      c.ints([-1])])

    real, imag = part(0), (part(1) if width == 2 else None)
    # (R + iI)(C -/+ iS): real part R C +/- I S, imaginary part I C -/+ R S
    parts = [c.tmp("MatMul", [real, c.const(cos, "cos")])]
    if kind is not Kind.IRFFT:
        parts.append(c.tmp("MatMul", [real, c.const(sign * sin, "sin")]))
    if imag is not None:
        parts[0] = c.tmp("Add", [parts[0], c.tmp("MatMul", [imag, c.const(-sign * sin, "nsin")])])
        if kind is not Kind.IRFFT:
            parts[1] = c.tmp("Add", [parts[1], c.tmp("MatMul", [imag, c.const(cos, "cos")])])
    stacked = c.tmp("Concat", [c.tmp("Unsqueeze", [p, c.ints([-1])]) for p in parts], axis=-1)
    back = c.tmp("Transpose", [stacked], perm=[perm.index(a) for a in range(rank)])
    c.final("Cast", [back], to=onnx_dtype(c.node.tensor_shape.dtype))


@handles(dequant.DequantMatMul)
def _dequant_matmul(c) -> None:
    op, x = c.op, c.x[0]
    packed, *groups = (_constant_input(c, i) for i in range(1, len(c.node.inputs)))
    k = _packed_k(c, packed)
    dtype = c.shape(0).dtype
    form = c.builder.packed
    whole_rows = k % op.scheme.block_size == 0 and not op.scheme.is_mlx
    bits, block = (quant.nbits_bits(op.scheme), quant.nbits_block(op.scheme)) if whole_rows \
        else (0, 0)
    if form is PackedForm.NBITS and whole_rows and dtype is DType.F32 and \
            quant.nbits_supported(bits, block):
        codes, scales = quant.nbits_arrays(op, packed, k)
        c.builder.note_packed(op.scheme, f"com.microsoft.MatMulNBits ({bits} bits, "
                                         f"block {block})")
        c.final("MatMulNBits", [x, c.const(codes, "codes"), c.const(scales, "scales")],
                domain="com.microsoft", K=k, N=op.n, bits=bits, block_size=block)
        return
    compute = np.float64 if dtype is DType.F64 else np.float32
    if form is PackedForm.DECOMPRESS and whole_rows and dtype is DType.F32:
        codes, scales = quant.decompress_arrays(op, packed, k)
        c.builder.note_packed(op.scheme, "int8 codes x scales (Cast, Mul) before MatMul")
        w = c.tmp("Mul", [c.tmp("Cast", [c.const(codes, "codes")], to=TensorProto.FLOAT),
                          c.const(scales, "scales")])
        w = c.tmp("Reshape", [w, c.ints([op.n, k], "nk")])
        c.final("MatMul", [x, c.tmp("Transpose", [w], perm=[1, 0])])
        return
    c.builder.note_packed(op.scheme, "f32 (dequantised by rlx.codecs)")
    weight = c.const(dense_weight(c.node, op.scheme, packed, k, np.dtype(compute),
                                  tuple(groups)), "weight")
    if dtype.numpy == compute:
        c.final("MatMul", [x, weight])
        return
    from rlx.onnx.export import onnx_dtype

    wide = c.tmp("Cast", [x], to=onnx_dtype(np.dtype(compute)))
    c.final("Cast", [c.tmp("MatMul", [wide, weight])], to=onnx_dtype(dtype))


_dequant_matmul.raw_inputs = (1, 2, 3)  # read from the graph


def _packed_k(c, packed: np.ndarray) -> int:
    """K of a DequantMatMul, fixed by its static weight (N * K values in whole blocks)
    whatever the activations' dims: x's K may be symbolic where a Reshape with a run-time
    shape feeds the product, and the exported ops take any M."""
    scheme, n = c.op.scheme, c.op.n
    values = packed.size // scheme.block_bytes * scheme.block_size
    if packed.size % scheme.block_bytes or values % n:
        raise ExportError(f"{c.node.label}: {packed.size} bytes of {scheme} do not hold "
                          f"{n} rows")
    return values // n


def _constant_input(c, index: int) -> np.ndarray:
    """Input `index` of the node, which must be a graph constant (a packed weight)."""
    from rlx.ir.ops.sources import Constant

    node = c.scope.graph.node(c.node.inputs[index])
    if not isinstance(node.op, Constant):
        raise ExportError(f"{c.node.label}: its packed weight (input {index}) must be a "
                          "constant")
    return node.op.array(node.shape)


@handles(packed_ops.DecodeWeight)
def _decode_weight(c) -> None:
    """A weight stored as padded rows: exported as the dense f32 initializer it decodes to
    (ONNX has no row-padded block format)."""
    c.builder.note_packed(c.op.encoding, "f32 (dequantised by rlx.codecs)")
    exponents = _constant_input(c, 1) if len(c.node.inputs) > 1 else None
    c.final("Identity", [c.const(c.op.dense(_constant_input(c, 0), exponents), "weight")])


_decode_weight.raw_inputs = (0, 1)  # read from the graph


@handles(packed_ops.DequantGather)
def _dequant_gather(c) -> None:
    """A table stored as padded rows: the dense f32 table, then a plain Gather."""
    op = c.op
    table = decode_rows(op.encoding, _constant_input(c, 0), op.vocab, op.dim)
    c.builder.note_packed(op.encoding, "f32 (dequantised by rlx.codecs)")
    c.final("Gather", [c.const(np.ascontiguousarray(table), "table"), c.x[1]], axis=0)


_dequant_gather.raw_inputs = (0,)  # read from the graph


# -- integer quantisation ----------------------------------------------------------------------
def _linear_attrs(c) -> dict:
    """axis, and block_size where blocked; both that and 16-bit types need opset 21."""
    if c.op.block_size or any(c.shape(i).dtype.itemsize > 1 for i in (0, 2)):
        c.builder.opset = max(c.builder.opset, 21)
    return {"axis": c.op.axis, **({"block_size": c.op.block_size} if c.op.block_size else {})}


@handles(quant_ops.QuantizeLinear, quant_ops.DequantizeLinear)
def _quantize_linear(c) -> None:
    c.final(type(c.op).__name__, c.x, **_linear_attrs(c))


@handles(quant_ops.MatMulInteger, quant_ops.DynamicQuantizeLinear, quant_ops.QLinearMatMul)
def _integer_op(c) -> None:
    """The ONNX op of the same name and inputs (DynamicQuantizeLinear's three outputs)."""
    c.final(type(c.op).__name__, c.x)


@handles(quant_ops.ConvInteger, quant_ops.QLinearConv)
def _integer_conv(c) -> None:
    """The ONNX op of the same name, inputs and window: onnxruntime runs its int8 kernel."""
    op = c.op
    if op.same is not None and any(d > 1 for d in op.dilations):
        raise ExportError(f"{c.node.label}: onnxruntime takes no dilation with auto_pad "
                          f"{op.same.value}, and {type(op).__name__} cannot be padded first")
    c.final(type(op).__name__, c.x, group=op.groups, **_window_attrs(op))


# -- nn ----------------------------------------------------------------------------------------
def _window_attrs(op, kernel=None) -> dict:
    """Sliding-window attributes; run-time SAME pads stay `auto_pad`, which the engines
    work out from the actual sizes."""
    attrs = {"strides": list(op.strides) or None, "pads": list(op.pads) or None,
             "dilations": list(op.dilations) or None}
    same = getattr(op, "same", None)
    if same is not None:
        attrs["auto_pad"] = same.value
    if kernel is not None:
        attrs["kernel_shape"] = list(kernel)
    return attrs


@handles(windows.Conv)
def _conv(c) -> None:
    op = c.op
    if op.same is not None and any(d > 1 for d in op.dilations):
        # onnxruntime refuses dilation with auto_pad SAME_*: pad to the rule's sizes first
        padded = c.tmp("Pad", [c.x[0], _same_pads(c)])
        attrs = {**_window_attrs(op), "auto_pad": None}
        c.final("Conv", [padded, *c.x[1:]], group=op.groups, **attrs)
        return
    c.final("Conv", c.x, group=op.groups, **_window_attrs(op))


def _same_pads(c) -> str:
    """ONNX Pad's pads [0, 0, begin..., 0, 0, end...] of a Conv's SAME rule, computed from
    its input's shape at run time: total = max(0, (ceil(n / s) - 1) s + extent - n)."""
    op = c.op
    win = op.window(c.shape(1).dims[2:], (1,) * len(op.dilations))  # strides, extents
    strides, extents = c.ints(win.strides, "strides"), c.ints(win.extent, "extents")
    sizes = c.tmp("Shape", [c.x[0]], start=2)
    one, zero, two = c.ints([1], "one"), c.ints([0], "zero"), c.ints([2], "two")
    out = c.tmp("Div", [c.tmp("Sub", [c.tmp("Add", [sizes, strides]), one]), strides])
    reach = c.tmp("Add", [c.tmp("Mul", [c.tmp("Sub", [out, one]), strides]), extents])
    total = c.tmp("Max", [c.tmp("Sub", [reach, sizes]), zero])
    small = c.tmp("Div", [total, two])
    big = c.tmp("Sub", [total, small])
    begin, end = (big, small) if op.same is windows.SamePad.LOWER else (small, big)
    lead = c.ints([0, 0], "lead")
    return c.tmp("Concat", [lead, begin, lead, end], axis=0)


@handles(windows.ConvTranspose)
def _conv_transpose(c) -> None:
    c.final("ConvTranspose", c.x, group=c.op.groups,
            output_padding=list(c.op.output_padding) or None, **_window_attrs(c.op))


@handles(windows.Pool)
def _pool(c) -> None:
    op = c.op
    attrs = _window_attrs(op, op.kernel)
    if op.kind is windows.PoolKind.MAX:
        c.final("MaxPool", c.x, ceil_mode=int(op.ceil_mode), **attrs)
    else:
        c.final("AveragePool", c.x, ceil_mode=int(op.ceil_mode),
                count_include_pad=int(op.count_include_pad), **attrs)


@handles(windows.GlobalPool)
def _global_pool(c) -> None:
    c.final("GlobalMaxPool" if c.op.kind is windows.PoolKind.MAX else "GlobalAveragePool", c.x)


@handles(nn.Softmax, nn.LogSoftmax)
def _softmax(c) -> None:
    """Along an axis that two or more axes follow, over a rank-3 view `[before, axis,
    after]` (the same values): onnxruntime 1.32 transposes such an axis last with a slow
    general transpose, one thread (YOLO's DFL head, softmax over 16 of [1, 16, 4, 2100]:
    1.03 ms, 0.19 ms as rank 3; [1, 1000, 8, 8] over 1000: 0.46 ms, 0.05); OpenVINO runs
    both alike. Where one axis follows, the view is 7% slower: written as it is."""
    op_type = "Softmax" if isinstance(c.op, nn.Softmax) else "LogSoftmax"
    dims = c.shape().dims
    axis = c.op.axis % len(dims)
    view = _rank3_view(dims, axis)
    if view is None:
        c.final(op_type, c.x, axis=c.op.axis)
        return
    back = c.ints(list(dims), "shape") if all(isinstance(d, int) for d in dims) \
        else c.tmp("Shape", c.x)
    flat = c.tmp(op_type, [c.tmp("Reshape", [c.x[0], c.ints(view, "view")])], axis=1)
    c.final("Reshape", [flat, back])


def _rank3_view(dims: tuple, axis: int) -> list[int] | None:
    """`[before, dims[axis], after]` for `_softmax`, in Reshape's terms: a symbolic
    `before` of one axis is 0 (that dim copied), a symbolic `after` -1; None where fewer
    than two axes follow `axis`, where the axis or a `before` of several axes is symbolic,
    or where a static dim is 0 (a view of nothing)."""
    if len(dims) - axis < 3 or 0 in dims or not isinstance(dims[axis], int):
        return None
    before, after = dims[:axis], dims[axis + 1:]
    if all(isinstance(d, int) for d in before):
        first = math.prod(before)
    elif len(before) == 1:
        first = 0
    else:
        return None
    last = math.prod(after) if all(isinstance(d, int) for d in after) else -1
    return [first, dims[axis], last]


@handles(nn.LayerNorm)
def _layer_norm(c) -> None:
    c.final("LayerNormalization", c.x, axis=c.op.axis, epsilon=c.op.epsilon)


@handles(channelwise.BatchNormInference)
def _batch_norm(c) -> None:
    c.final("BatchNormalization", c.x, epsilon=c.op.epsilon)


@handles(channelwise.InstanceNorm)
def _instance_norm(c) -> None:
    c.final("InstanceNormalization", c.x, epsilon=c.op.epsilon)


@handles(resize.Resize)
def _resize(c) -> None:
    """ONNX Resize takes sizes or scales, not both; rlx may know both (sizes for the
    output, scales for the coordinate transform). Sizes go when they say everything:
    align_corners (which ignores the scale), or scales that are exactly out / in; when both
    are run-time values, sizes (the output shape is kept, the transform's scale becomes
    out / in)."""
    op = c.op
    given = dict(zip(op.operands, c.x[1:]))
    roi = given.get("roi") or ("" if op.roi is None else c.const(
        np.asarray(op.roi, np.float32), "roi"))
    if "scales" in given and "sizes" not in given and op.sizes is None:
        scales, sizes = _float32(c, given["scales"], op.operands.index("scales") + 1), ""
    elif "sizes" in given:
        scales, sizes = "", given["sizes"]
    elif op.scales is not None and (op.sizes is None or not _sizes_suffice(c, op)):
        scales, sizes = c.const(np.asarray(op.scales, np.float32), "scales"), ""
    else:
        scales, sizes = "", c.ints(op.sizes, "sizes")
    c.final("Resize", [c.x[0], roi, scales, sizes], mode=op.mode.value,
            coordinate_transformation_mode=op.coordinate_mode.value,
            nearest_mode=op.nearest_mode.value, cubic_coeff_a=op.cubic_coeff_a,
            exclude_outside=int(op.exclude_outside),
            extrapolation_value=op.extrapolation_value, antialias=int(op.antialias))


def _sizes_suffice(c, op) -> bool:
    if op.coordinate_mode is resize.CoordinateMode.ALIGN_CORNERS:
        return True
    dims = c.shape(0).dims
    return all(isinstance(d, int) and d * s == n for d, s, n in zip(dims, op.scales, op.sizes))


def _float32(c, name: str, k: int) -> str:
    dtype = c.shape(k).dtype
    return name if dtype is DType.F32 else c.tmp("Cast", [name], to=TensorProto.FLOAT)


# -- reductions --------------------------------------------------------------------------------
_REDUCE = {
    "sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin",
    "prod": "ReduceProd", "l1": "ReduceL1", "l2": "ReduceL2", "log_sum": "ReduceLogSum",
    "log_sum_exp": "ReduceLogSumExp", "sum_square": "ReduceSumSquare",
}


@handles(reduce.Reduce)
def _reduce(c) -> None:
    op = c.op
    op_type = _REDUCE[op.op.value]
    if len(c.x) == 2:
        c.final(op_type, [c.x[0], _int64(c, c.x[1], c.shape(1).dtype)],
                keepdims=int(op.keepdims), noop_with_empty_axes=int(op.noop_with_empty_axes))
    elif op.axes is None:
        c.final(op_type, [c.x[0]], keepdims=int(op.keepdims))
    elif not op.axes:
        _reduce_none(c, op.op.value)
    else:
        c.final(op_type, [c.x[0], c.ints(op.axes, "axes")], keepdims=int(op.keepdims))


def _reduce_none(c, kind: str) -> None:
    """Reducing no axis applies the op to each element alone."""
    x = c.x[0]
    if kind in ("sum", "mean", "max", "min", "prod", "log_sum_exp"):
        c.final("Identity", [x])
    elif kind in ("l1", "l2"):
        c.final("Abs", [x])
    elif kind == "log_sum":
        c.final("Log", [x])
    else:
        c.final("Mul", [x, x])


@handles(reduce.ArgMax, reduce.ArgMin)
def _arg(c) -> None:
    c.final(type(c.op).__name__, c.x, axis=c.op.axis, keepdims=int(c.op.keepdims),
            select_last_index=int(c.op.select_last_index))


@handles(reduce.CumSum)
def _cumsum(c) -> None:
    axis = c.x[1] if len(c.x) == 2 else c.ints(c.op.axis, "axis")
    c.final("CumSum", [c.x[0], axis], exclusive=int(c.op.exclusive), reverse=int(c.op.reverse))


@handles(reduce.TopK)
def _topk(c) -> None:
    if len(c.x) == 2:
        k = c.tmp("Reshape", [_int64(c, c.x[1], c.shape(1).dtype), c.ints([1], "one")])
    else:
        k = c.ints([c.op.k], "k")
    c.final("TopK", [c.x[0], k], axis=c.op.axis, largest=int(c.op.largest),
            sorted=int(c.op.sorted))


# -- shaping -----------------------------------------------------------------------------------
def _int64(c, name: str, dtype: DType) -> str:
    return name if dtype is DType.I64 else c.tmp("Cast", [name], to=TensorProto.INT64)


def _operand(c, attr: str, k: int = 1, hint: str = "") -> str:
    """A shape-like operand: the static attribute as int64, else input `k` as int64."""
    value = getattr(c.op, attr)
    if value is not None:
        return c.ints(list(value), hint or attr)
    return _int64(c, c.x[k], c.shape(k).dtype)


@handles(shaping.Reshape)
def _reshape(c) -> None:
    c.final("Reshape", [c.x[0], _operand(c, "shape")], allowzero=int(c.op.allowzero))


@handles(shaping.Transpose)
def _transpose(c) -> None:
    perm = None if c.op.perm is None else list(c.op.resolved_perm(c.shape().rank))
    c.final("Transpose", c.x, perm=perm)


@handles(slicing.Concat)
def _concat(c) -> None:
    c.final("Concat", c.x, axis=c.op.axis)


@handles(shaping.Expand)
def _expand(c) -> None:
    c.final("Expand", [c.x[0], _operand(c, "shape")])


@handles(blocks.Tile)
def _tile(c) -> None:
    c.final("Tile", [c.x[0], _operand(c, "repeats")])


@handles(shaping.Flatten)
def _flatten(c) -> None:
    c.final("Flatten", c.x, axis=c.op.axis)


@handles(shaping.Squeeze, shaping.Unsqueeze)
def _squeeze(c) -> None:
    op_type = type(c.op).__name__
    if c.op.axes is None and len(c.x) == 1:
        c.final(op_type, c.x)
    else:
        c.final(op_type, [c.x[0], _operand(c, "axes")])


@handles(slicing.Slice)
def _slice(c) -> None:
    op = c.op
    if op.starts is not None:
        inputs = [c.x[0], c.ints(op.starts, "starts"), c.ints(op.ends, "ends")]
        if op.axes is not None or op.steps is not None:
            inputs.append(c.ints(op.axes if op.axes is not None else range(len(op.starts)),
                                 "axes"))
        if op.steps is not None:
            inputs.append(c.ints(op.steps, "steps"))
    else:
        inputs = [c.x[0]] + [_int64(c, name, c.shape(k).dtype)
                             for k, name in enumerate(c.x[1:], start=1)]
    c.final("Slice", inputs)


@handles(slicing.Split)
def _split(c) -> None:
    c.final("Split", [c.x[0], c.ints(c.op.sizes, "split")], axis=c.op.axis)


@handles(blocks.Pad)
def _pad(c) -> None:
    op, x = c.op, c.x[0]
    dtype = c.shape().dtype
    if op.pads is not None:
        inputs = [x, c.ints(op.pads, "pads")]
        if op.mode is blocks.PadMode.CONSTANT:
            inputs.append(c.scalar(op.value, dtype))
    else:
        inputs = [x, _int64(c, c.x[1], c.shape(1).dtype)]
        if len(c.x) == 3:
            inputs.append(c.x[2])
    c.final("Pad", inputs, mode=op.mode.value)


@handles(shaping.Gather)
def _gather(c) -> None:
    c.final("Gather", c.x, axis=c.op.axis)


@handles(indexing.GatherElements)
def _gather_elements(c) -> None:
    c.final("GatherElements", c.x, axis=c.op.axis)


@handles(indexing.GatherND)
def _gather_nd(c) -> None:
    c.final("GatherND", c.x, batch_dims=c.op.batch_dims)


@handles(indexing.ScatterND)
def _scatter_nd(c) -> None:
    c.final("ScatterND", [c.x[0], _int64(c, c.x[1], c.shape(1).dtype), c.x[2]],
            reduction=c.op.reduction.value)


@handles(indexing.ScatterElements)
def _scatter_elements(c) -> None:
    c.final("ScatterElements", c.x, axis=c.op.axis, reduction=c.op.reduction.value)


@handles(generators.ShapeOf)
def _shape_of(c) -> None:
    c.final("Shape", c.x, start=c.op.start if c.op.start else None, end=c.op.end)


@handles(generators.Fill)
def _fill(c) -> None:
    from onnx import helper

    from rlx.onnx.export import onnx_dtype

    op = c.op
    value = helper.make_tensor("value", onnx_dtype(op.dtype), [1],
                               np.asarray([op.value], op.dtype.numpy).tobytes(), raw=True)
    shape = _operand(c, "shape", k=0)
    c.final("ConstantOfShape", [shape], value=value)


@handles(indexing.OneHot)
def _one_hot(c) -> None:
    c.final("OneHot", c.x, axis=c.op.axis)


@handles(blocks.DepthToSpace)
def _depth_to_space(c) -> None:
    c.final("DepthToSpace", c.x, blocksize=c.op.blocksize, mode=c.op.mode.value.upper())


@handles(blocks.SpaceToDepth)
def _space_to_depth(c) -> None:
    c.final("SpaceToDepth", c.x, blocksize=c.op.blocksize)


@handles(indexing.Trilu)
def _trilu(c) -> None:
    c.final("Trilu", [c.x[0], c.ints(c.op.k, "k")], upper=int(c.op.upper))


@handles(indexing.Compress)
def _compress(c) -> None:
    c.final("Compress", c.x, axis=c.op.axis)


# -- control flow ------------------------------------------------------------------------------
@handles(ctl.Composite)
def _composite(c) -> None:
    """The foreign node as the model had it where the target runs its domain, else its body."""
    op, domains = c.op, c.builder.domains
    if domains is not None and op.domain not in domains:
        c.inline(op.body)
        return
    names = [""] * (max(op.slots, default=-1) + 1)
    for slot, name in zip(op.slots, c.x):
        names[slot] = name
    c.final(op.op_type, names, domain=op.domain, **dict(op.attributes))


@handles(ctl.If)
def _if(c) -> None:
    cond, *captured = c.x
    bound = dict(enumerate(captured))
    then = c.subgraph(c.op.then_branch, bound, 0, "then", anchor=cond)
    other = c.subgraph(c.op.else_branch, bound, 0, "else", anchor=cond)
    cond = c.tmp("Reshape", [cond, c.ints([], "scalar")]) if c.shape(0).rank else cond
    c.final("If", [cond], then_branch=then, else_branch=other)


@handles(ctl.Loop)
def _loop(c) -> None:
    n = c.op.n_carried
    formal = 2 + n
    bound = {formal + k: name for k, name in enumerate(c.x[2 + n:])}
    body = c.subgraph(c.op.body, bound, formal, "body")
    c.final("Loop", c.x[:2 + n], body=body)


@handles(ctl.Scan)
def _scan(c) -> None:
    op = c.op
    body = c.subgraph(op.body, {}, len(op.body.inputs()), "body")
    c.final("Scan", c.x, body=body, num_scan_inputs=len(c.x) - op.n_state,
            scan_input_axes=list(op.scan_input_axes) or None,
            scan_input_directions=list(op.scan_input_directions) or None,
            scan_output_axes=list(op.scan_output_axes) or None,
            scan_output_directions=list(op.scan_output_directions) or None)


_ACT_NAMES = {name.lower(): name for name in ctl.RNN_ACTIVATIONS}


def _recurrent_attrs(op) -> dict:
    attrs = {"hidden_size": op.hidden_size, "direction": op.direction.value,
             "activations": [_ACT_NAMES[a.lower()] for a in op.activations] or None,
             "activation_alpha": list(op.activation_alpha) or None,
             "activation_beta": list(op.activation_beta) or None, "clip": op.clip,
             "layout": op.layout or None}
    if isinstance(op, ctl.LSTM):
        attrs["input_forget"] = int(op.input_forget) or None
    if isinstance(op, ctl.GRU):
        attrs["linear_before_reset"] = int(op.linear_before_reset) or None
    return attrs


def _optional_inputs(names: list[str], present, order) -> list[str]:
    given = dict(zip(present, names))
    inputs = [given.get(name, "") for name in order]
    while inputs and inputs[-1] == "":
        inputs.pop()
    return inputs


@handles(ctl.LSTM, ctl.GRU, ctl.RNN)
def _recurrent(c) -> None:
    op = c.op
    inputs = c.x[:3] + _optional_inputs(c.x[3:], op.present, op.optional_inputs)
    c.final(type(op).__name__, inputs, **_recurrent_attrs(op))


@handles(ctl.QuantizedLSTM)
def _quantized_lstm(c) -> None:
    """com.microsoft.DynamicQuantizeLSTM (W and R back in its [D, K, 4H] layout); for
    OpenVINO, which runs no com.microsoft ops, an ONNX LSTM on the dequantised weights
    (float32, not onnxruntime's per-step quantisation)."""
    op = c.op
    given = dict(zip(op.present, c.x[3:]))
    lstm_inputs = _optional_inputs(c.x[3:], op.present, ctl.LSTM.optional_inputs)
    attrs = _recurrent_attrs(op)
    if op.layout:
        raise ExportError(f"{c.node.label}: DynamicQuantizeLSTM has no batch-first layout")
    if c.builder.packed is not PackedForm.DECOMPRESS:
        lstm_inputs += [""] * (len(ctl.LSTM.optional_inputs) - len(lstm_inputs))
        weights = [c.tmp("Transpose", [w], perm=[0, 2, 1]) for w in c.x[1:3]]
        quantisation = [given[name] for name in ctl.QuantizedLSTM.optional_inputs[-4:]]
        c.final("DynamicQuantizeLSTM", [c.x[0], *weights, *lstm_inputs, *quantisation],
                domain="com.microsoft", **attrs)
        return
    weights = [_dequantized(c, w, given[f"{name}_scale"], given[f"{name}_zero_point"],
                            c.shape(3 + op.present.index(f"{name}_scale")).rank)
               for w, name in zip(c.x[1:3], ("W", "R"))]
    c.final("LSTM", [c.x[0], *weights, *lstm_inputs], **attrs)


def _dequantized(c, weight: str, scale: str, zero: str, rank: int) -> str:
    """(weight - zero) * scale in float32, the parameters per direction ([D]) or per gate
    row ([D, 4H]) of a [D, 4H, K] weight."""
    shape = c.ints([0, 1, 1] if rank == 1 else [0, -1, 1], "shape")

    def real(name: str) -> str:
        return c.tmp("Reshape", [c.tmp("Cast", [name], to=TensorProto.FLOAT), shape])

    centred = c.tmp("Sub", [c.tmp("Cast", [weight], to=TensorProto.FLOAT), real(zero)])
    return c.tmp("Mul", [centred, c.tmp("Reshape", [scale, shape])])


@handles(ctl.Fail)
def _fail(c) -> None:
    """A value that errors when computed: a Gather at an index far out of bounds that
    depends on a run-time value (so no engine folds it at load). onnxruntime raises
    "indices element out of data bounds"; the message is kept as the node's doc string."""
    shapes = c.out_shape if isinstance(c.out_shape, tuple) else (c.out_shape,)
    if c.anchor is None:
        raise ExportError(f"{c.node.label}: a Fail needs a run-time value to depend on")
    flag = c.tmp("IsNaN", [c.tmp("ReduceSum", [c.tmp("Cast", [c.anchor], to=TensorProto.FLOAT)],
                                 keepdims=0)])
    index = c.tmp("Add", [c.tmp("Cast", [flag], to=TensorProto.INT64), c.ints(2**40, "far")])
    for out, shape in zip(c.outs, shapes):
        data = c.const(np.zeros(1, shape.dtype.numpy), "fail")
        value = c.tmp("Gather", [data, index])
        c.scope.add("Reshape", [value, c.ints([1] * shape.rank, "ones")], [out],
                    f"{c.base}/Fail", doc_string=c.op.message[:500])
