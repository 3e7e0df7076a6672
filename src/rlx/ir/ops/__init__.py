"""Every op type, grouped by family. `OPS` maps serialised names to classes."""

from __future__ import annotations

from rlx.ir.ops.base import (
    OPS,
    Op,
    OpMixin,
    OutShape,
    expect_dtype,
    op_axis,
)
from rlx.ir.ops.control import (
    GRU,
    LSTM,
    RNN,
    RNN_ACTIVATIONS,
    Fail,
    If,
    Loop,
    QuantizedLSTM,
    RnnDirection,
    Scan,
)
from rlx.ir.ops.elementwise import (
    Activation,
    Binary,
    BinaryOp,
    Cast,
    Clamp,
    Compare,
    CompareOp,
    Identity,
    Logical,
    LogicalOp,
    Not,
    Unary,
    Where,
)
from rlx.ir.ops.linalg import (
    PACKED_SCHEMES,
    DequantMatMul,
    Einsum,
    MatMul,
    QuantScheme,
    dequant_inputs,
)
from rlx.ir.ops.multi import (
    TupleGet,
)
from rlx.ir.ops.nn import (
    BatchNormInference,
    Conv,
    ConvTranspose,
    CoordinateMode,
    GlobalPool,
    InstanceNorm,
    LayerNorm,
    LogSoftmax,
    NearestMode,
    Pool,
    PoolKind,
    PRelu,
    Resize,
    ResizeMode,
    Softmax,
)
from rlx.ir.ops.packed import (
    PACKED_ENCODINGS,
    DecodeWeight,
    DequantGather,
    padded_row_bytes,
)
from rlx.ir.ops.reduce import (
    ArgMax,
    ArgMin,
    CumSum,
    Reduce,
    ReduceOp,
    TopK,
)
from rlx.ir.ops.shaping import (
    Compress,
    Concat,
    DepthToSpace,
    DepthToSpaceMode,
    Expand,
    Fill,
    Flatten,
    Gather,
    GatherElements,
    GatherND,
    NonZero,
    OneHot,
    Pad,
    PadMode,
    Range,
    Reshape,
    ScatterElements,
    ScatterND,
    ScatterReduction,
    ShapeOf,
    Size,
    Slice,
    SpaceToDepth,
    Split,
    Squeeze,
    Tile,
    Transpose,
    Trilu,
    Unsqueeze,
)
from rlx.ir.ops.sources import (
    Constant,
    Input,
    Param,
    as_byte_array,
)

__all__ = [
    "Op", "OpMixin", "OPS", "OutShape", "op_axis", "expect_dtype", "Fail", "If", "Loop", "Scan",
    "RnnDirection", "RNN_ACTIVATIONS", "LSTM", "GRU", "RNN", "Activation", "BinaryOp", "CompareOp",
    "LogicalOp", "Unary", "Binary", "Compare", "Logical", "Not", "Where", "Cast", "Clamp",
    "Identity", "MatMul", "PACKED_SCHEMES", "QuantScheme", "DequantMatMul", "Einsum",
    "dequant_inputs", "TupleGet", "Conv", "ConvTranspose", "PoolKind", "Pool", "GlobalPool",
    "Softmax", "LogSoftmax", "LayerNorm", "BatchNormInference", "InstanceNorm", "PRelu",
    "ResizeMode", "CoordinateMode", "NearestMode", "Resize", "PACKED_ENCODINGS",
    "padded_row_bytes", "DecodeWeight", "DequantGather", "ReduceOp", "Reduce", "ArgMax", "ArgMin",
    "CumSum", "TopK", "PadMode", "ScatterReduction", "DepthToSpaceMode", "Reshape", "Transpose",
    "Concat", "Slice", "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements",
    "Expand", "Pad", "Tile", "Split", "Squeeze", "Unsqueeze", "Flatten", "ShapeOf", "Size",
    "Range", "Fill", "OneHot", "DepthToSpace", "SpaceToDepth", "Trilu", "NonZero", "Compress",
    "Input", "Param", "Constant", "as_byte_array",
    "QuantizedLSTM",
]
