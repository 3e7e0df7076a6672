"""The graphs a file baked with a precision plan (`rlx.artifact.precision`) runs as.

`exact_graph` is what `precision="exact"` runs on a planned file: every activation pair the
plan inserted removed, the int8 weights dequantised as stored (f32 products of the codes and
their scales, computed as DequantizeLinear does: the original f32 weights are not in the
file, so "exact" is f32 arithmetic on the weights the file holds).

`int8_products_graph` is what OpenVINO runs of the int8 part of a file baked before its own
int8 set (`rlx.artifact.openvino_form`): the plan's activation pairs read only by the int8
products, every other op computing f32 (`rlx.engines.openvino_int8` says why; those bakes'
guard checked this form too).

Apart from the plan's record: a load of a file without a plan (every profile but `fast`)
imports neither function (issue 35).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from rlx.artifact.precision import PrecisionPlan
    from rlx.ir.graph import Graph

__all__ = ["exact_graph", "int8_products_graph"]


def exact_graph(graph: Graph, plan: PrecisionPlan, coded: Collection[int] = ()) -> Graph:
    """`graph` without the plan's activation quantisers (each DequantizeLinear reading one
    reads its input instead) and its int8 weights dequantised into f32 constants (one float
    copy: every engine then runs a plain f32 graph), but for the DequantizeLinear nodes
    `coded` (kept as they are). The graph itself when the plan made nothing int8."""
    from rlx.ir.ops.quant import DequantizeLinear, QuantizeLinear
    from rlx.ir.rewrite import Rewriter

    names = set(plan.quantizers)
    if not names:
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes():
        source = graph.node(node.inputs[0]) if node.inputs else None
        if isinstance(node.op, QuantizeLinear) and node.name in names:
            rw.drop(node.id)
        elif isinstance(node.op, DequantizeLinear) and source is not None \
                and isinstance(source.op, QuantizeLinear) and source.name in names:
            rw.replace(node.id, rw.id(source.inputs[0]))
        elif isinstance(node.op, DequantizeLinear) and node.id not in coded \
                and (value := _dequantized(graph, node)) is not None:
            rw.substitute_constant(node, value)
        else:
            rw.copy(node)
    return rw.finish()


def int8_products_graph(graph: Graph, plan: PrecisionPlan) -> Graph:
    """`graph` with the plan's activation pairs read only by the int8 products (Convs and
    MatMuls whose weight is a DequantizeLinear of constants) reading them as their
    activation: every other reader reads the unquantised tensor."""
    from rlx.ir.ops.quant import DequantizeLinear, QuantizeLinear
    from rlx.ir.rewrite import Rewriter

    names = set(plan.quantizers)
    if not names:
        return graph
    plain = {n.id: q.inputs[0] for n in graph.nodes() if isinstance(n.op, DequantizeLinear)
             and n.inputs and isinstance((q := graph.node(n.inputs[0])).op, QuantizeLinear)
             and q.name in names}  # pair (its DequantizeLinear) -> the unquantised tensor
    users = graph.users()
    read = {i for i in plain if any(_reads_as_int8_activation(graph, graph.node(u), i)
                                    for u in users[i])}
    live = {graph.node(i).inputs[0] for i in read}  # the quantisers a pair still read uses
    rw = Rewriter(graph)
    for node in graph.nodes():
        if isinstance(node.op, QuantizeLinear) and node.name in names and node.id not in live \
                or node.id in plain and node.id not in read:
            rw.drop(node.id)
        elif any(i in plain for i in node.inputs) \
                and not _reads_as_int8_activation(graph, node, node.inputs[0]):
            rw.substitute(node, node.op, [rw.id(plain.get(i, i)) for i in node.inputs],
                          node.shape)
        else:
            rw.copy(node)
    return rw.finish()


def _reads_as_int8_activation(graph: Graph, user: Any, value: int) -> bool:
    """Whether `user` is an int8 product whose activation (input 0) is node `value`."""
    from rlx.ir.ops.linalg import MatMul
    from rlx.ir.ops.quant import DequantizeLinear
    from rlx.ir.ops.sources import Constant
    from rlx.ir.ops.windows import Conv

    if not isinstance(user.op, (Conv, MatMul)) or len(user.inputs) < 2 \
            or user.inputs[0] != value:
        return False
    weight = graph.node(user.inputs[1])
    return isinstance(weight.op, DequantizeLinear) \
        and isinstance(graph.node(weight.inputs[0]).op, Constant)


def _dequantized(graph: Graph, node: Any) -> np.ndarray | None:
    """The f32 value of a per-tensor or per-axis DequantizeLinear of constants, or None."""
    from rlx.ir.rewrite import constant_value

    codes, scale, zero = (constant_value(graph.node(i)) for i in node.inputs)
    if codes is None or scale is None or zero is None or node.op.block_size \
            or scale.dtype != np.float32:
        return None
    shape = [1] * codes.ndim
    if scale.ndim == 1 and scale.size > 1:
        shape[node.op.axis % codes.ndim] = -1
    value = (codes.astype(np.float32) - zero.astype(np.float32).reshape(shape)) \
        * scale.reshape(shape)
    return value.astype(np.float32)
