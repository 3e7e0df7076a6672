"""The rlx graph IR: dtypes, shapes, ops, nodes, graphs, verification, text and JSON forms.

Names load on first use (`rlx._lazy`): a module that needs only `rlx.ir.dtype` or
`rlx.ir.shape` (feed checks, a warm engine load) does not import every op class.
"""

from rlx._lazy import lazy_exports

_LAZY = {
    "DType": "rlx.ir.dtype",
    **dict.fromkeys((
        "Dim", "Shape", "UNKNOWN", "broadcast_dims", "normalize_axis",
    ), "rlx.ir.shape"),
    **dict.fromkeys(("Graph", "Node"), "rlx.ir.graph"),
    **dict.fromkeys(("format_graph", "format_node"), "rlx.ir.printer"),
    **dict.fromkeys((
        "graph_from_dict", "graph_from_json", "graph_to_dict", "graph_to_json",
    ), "rlx.ir.serialize"),
    **dict.fromkeys((
        "ops", "Op", "OpMixin", "OPS", "OutShape", "op_axis", "expect_dtype", "Fail", "If",
        "Loop", "Scan", "RnnDirection", "RNN_ACTIVATIONS", "LSTM", "GRU", "RNN", "Activation",
        "BinaryOp", "CompareOp", "LogicalOp", "Unary", "Binary", "Compare", "Logical", "Not",
        "Where", "Cast", "Clamp", "Identity", "MatMul", "PACKED_SCHEMES", "QuantScheme",
        "DequantMatMul", "Einsum", "dequant_inputs", "TupleGet", "Conv", "ConvTranspose",
        "PoolKind", "Pool", "GlobalPool", "Softmax", "LogSoftmax", "LayerNorm",
        "BatchNormInference", "InstanceNorm", "PRelu", "ResizeMode", "CoordinateMode",
        "NearestMode", "Resize", "PACKED_ENCODINGS", "padded_row_bytes", "DecodeWeight",
        "DequantGather", "ReduceOp", "Reduce", "ArgMax", "ArgMin", "CumSum", "TopK", "PadMode",
        "ScatterReduction", "DepthToSpaceMode", "Reshape", "Transpose", "Concat", "Slice",
        "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Expand", "Pad",
        "Tile", "Split", "Squeeze", "Unsqueeze", "Flatten", "ShapeOf", "Size", "Range", "Fill",
        "OneHot", "DepthToSpace", "SpaceToDepth", "Trilu", "NonZero", "Compress", "Input",
        "Param", "Constant", "as_byte_array", "QuantizedLSTM",
    ), "rlx.ir.ops"),
    "verify": "rlx.ir.verification",
}
__all__ = [
    "DType", "Dim", "Graph", "Node", "Shape", "UNKNOWN", "broadcast_dims", "format_graph",
    "format_node", "graph_from_dict", "graph_from_json", "graph_to_dict", "graph_to_json",
    "normalize_axis", "ops", "verify", "Op", "OpMixin", "OPS", "OutShape", "op_axis",
    "expect_dtype", "Fail", "If", "Loop", "Scan", "RnnDirection", "RNN_ACTIVATIONS", "LSTM", "GRU",
    "RNN", "Activation", "BinaryOp", "CompareOp", "LogicalOp", "Unary", "Binary", "Compare",
    "Logical", "Not", "Where", "Cast", "Clamp", "Identity", "MatMul", "PACKED_SCHEMES",
    "QuantScheme", "DequantMatMul", "Einsum", "dequant_inputs", "TupleGet", "Conv",
    "ConvTranspose", "PoolKind", "Pool", "GlobalPool", "Softmax", "LogSoftmax", "LayerNorm",
    "BatchNormInference", "InstanceNorm", "PRelu", "ResizeMode", "CoordinateMode", "NearestMode",
    "Resize", "PACKED_ENCODINGS", "padded_row_bytes", "DecodeWeight", "DequantGather", "ReduceOp",
    "Reduce", "ArgMax", "ArgMin", "CumSum", "TopK", "PadMode", "ScatterReduction",
    "DepthToSpaceMode", "Reshape", "Transpose", "Concat", "Slice", "Gather", "GatherElements",
    "GatherND", "ScatterND", "ScatterElements", "Expand", "Pad", "Tile", "Split", "Squeeze",
    "Unsqueeze", "Flatten", "ShapeOf", "Size", "Range", "Fill", "OneHot", "DepthToSpace",
    "SpaceToDepth", "Trilu", "NonZero", "Compress", "Input", "Param", "Constant", "as_byte_array",
    "QuantizedLSTM",
]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
