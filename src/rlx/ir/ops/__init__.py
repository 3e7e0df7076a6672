"""Every op type, grouped by family. `OPS` maps serialised names to classes."""

from __future__ import annotations

from rlx.ir.ops.base import (
    OPS,
    Op,
    OutShape,
)
from rlx.ir.ops.control import (
    GRU,
    LSTM,
    RNN,
    RNN_ACTIVATIONS,
    Fail,
    If,
    Loop,
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

__all__ = ["OPS", "Op", "OutShape", "Fail", "GRU", "If", "LSTM", "Loop", "RNN", "RNN_ACTIVATIONS",
    "RnnDirection", "Scan", "Activation", "Binary", "BinaryOp", "Cast", "Clamp", "Compare",
    "CompareOp", "Identity", "Logical", "LogicalOp", "Not", "Unary", "Where", "DequantMatMul",
    "Einsum", "MatMul", "PACKED_SCHEMES", "QuantScheme", "TupleGet", "BatchNormInference", "Conv",
    "ConvTranspose",
    "CoordinateMode", "GlobalPool", "InstanceNorm", "LayerNorm", "LogSoftmax", "NearestMode",
    "PRelu", "Pool", "PoolKind", "Resize", "ResizeMode", "Softmax", "ArgMax", "ArgMin", "CumSum",
    "Reduce", "ReduceOp", "TopK", "Compress", "Concat", "DepthToSpace", "DepthToSpaceMode",
    "Expand", "Fill", "Flatten", "Gather", "GatherElements", "GatherND", "NonZero", "OneHot",
    "Pad", "PadMode", "Range", "Reshape", "ScatterElements", "ScatterND", "ScatterReduction",
    "ShapeOf", "Size", "Slice", "SpaceToDepth", "Split", "Squeeze", "Tile", "Transpose", "Trilu",
    "Unsqueeze", "Constant", "Input", "Param", "as_byte_array"]
