"""Ops and nodes in the user's terms: ONNX op types, ONNX node names, computing nodes.

The IR folds many ONNX ops into a few parameterised ones (`Binary(add)`, `Unary(erf)`,
`Reduce(mean)`), and adds structural nodes ONNX has no node for (graph inputs, weights,
tuple selectors). Reports count and name nodes as a user who knows the ONNX model reads
them: `Add`, `Erf`, `ReduceMean`, and only the nodes that compute something.
"""

from __future__ import annotations

from collections import Counter

from rlx.ir.graph import Graph, Node
from rlx.ir.ops.base import Op
from rlx.ir.ops.channelwise import BatchNormInference, InstanceNorm
from rlx.ir.ops.dequant import DequantMatMul
from rlx.ir.ops.elementwise import Binary, BinaryOp, Clamp, Unary
from rlx.ir.ops.generators import Fill, ShapeOf
from rlx.ir.ops.logic import Compare, CompareOp, Logical
from rlx.ir.ops.multi import TupleGet
from rlx.ir.ops.nn import LayerNorm
from rlx.ir.ops.packed import DecodeWeight, DequantGather
from rlx.ir.ops.reduce import Reduce
from rlx.ir.ops.sources import Constant, Input, Param
from rlx.ir.ops.windows import GlobalPool, Pool, PoolKind

__all__ = ["COMPUTING_NODES", "computing_nodes", "is_computing", "node_title", "op_type",
           "op_type_counts"]

COMPUTING_NODES = ("computing nodes: every op but graph inputs, weights and constants (stored "
                   "encoded or not), and tuple selectors; subgraphs included")
"""What `computing_nodes` counts, in words reports print beside the number."""

# DecodeWeight is how an encoded weight is stored, not a node of the model
_NOT_COMPUTING = (Input, Param, Constant, TupleGet, DecodeWeight)

# ONNX names that are not the IR enum value in CamelCase
_UNARY = {"recip": "Reciprocal", "is_nan": "IsNaN", "is_inf": "IsInf", "is_pos_inf": "IsInf",
          "is_neg_inf": "IsInf", "bit_not": "BitwiseNot", "gelu_approx": "Gelu",
          "rsqrt": "Rsqrt"}
_BINARY = {BinaryOp.FMOD: "Mod", BinaryOp.BIT_AND: "BitwiseAnd", BinaryOp.BIT_OR: "BitwiseOr",
           BinaryOp.BIT_XOR: "BitwiseXor", BinaryOp.SHL: "BitShift", BinaryOp.SHR: "BitShift"}
_COMPARE = {CompareOp.EQ: "Equal", CompareOp.NE: "NotEqual", CompareOp.LT: "Less",
            CompareOp.LE: "LessOrEqual", CompareOp.GT: "Greater",
            CompareOp.GE: "GreaterOrEqual"}
_RENAMED: dict[type[Op], str] = {
    Clamp: "Clip", BatchNormInference: "BatchNormalization", LayerNorm: "LayerNormalization",
    InstanceNorm: "InstanceNormalization", ShapeOf: "Shape", Fill: "ConstantOfShape",
}


def _camel(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in text.split("_"))


def op_type(op: Op) -> str:
    """The ONNX op type `op` computes (`Add`, `Erf`, `ReduceMean`, `MaxPool`); a packed
    matmul is `MatMul` with its encoding (`MatMul (Q8_0)`); ops ONNX has no name for keep
    the IR's."""
    if isinstance(op, Unary):
        return _UNARY.get(op.kind.value) or _camel(op.kind.value)
    if isinstance(op, Binary):
        return _BINARY.get(op.op) or _camel(op.op.value)
    if isinstance(op, Compare):
        return _COMPARE[op.op]
    if isinstance(op, Logical):
        return op.op.value.capitalize()
    if isinstance(op, Reduce):
        return "Reduce" + _camel(op.op.value)
    if isinstance(op, Pool):
        return "MaxPool" if op.kind is PoolKind.MAX else "AveragePool"
    if isinstance(op, GlobalPool):
        return "GlobalMaxPool" if op.kind is PoolKind.MAX else "GlobalAveragePool"
    if isinstance(op, DequantMatMul):
        return f"MatMul ({op.scheme.short_name})"
    if isinstance(op, DequantGather):
        return f"Gather ({op.encoding.short_name})"
    return _RENAMED.get(type(op), type(op).__name__)


def is_computing(op: Op) -> bool:
    """Whether a node of this op computes something (not a source or a tuple selector)."""
    return not isinstance(op, _NOT_COMPUTING)


def op_type_counts(graph: Graph) -> Counter[str]:
    """Computing nodes by ONNX op type, subgraphs included."""
    counts: Counter[str] = Counter()
    for node in graph.nodes():
        if is_computing(node.op):
            counts[op_type(node.op)] += 1
        for sub in node.op.subgraphs():
            counts.update(op_type_counts(sub))
    return counts


def computing_nodes(graph: Graph) -> int:
    """How many nodes compute something (see `COMPUTING_NODES`)."""
    return sum(op_type_counts(graph).values())


def node_title(node: Node) -> str:
    """A node as reports show it: its source-model (ONNX) node name, else its own name,
    else `%id`."""
    return node.origin or node.name or f"%{node.id}"
