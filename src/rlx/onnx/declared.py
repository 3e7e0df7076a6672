"""Declared output dims: what the ONNX file says its outputs are, where inference cannot.

rlx infers every shape itself; a dim it cannot determine is UNKNOWN ("?"). A model's
graph outputs often declare such a dim (`[1, 'seqlen']`), so each UNKNOWN dim of an output
takes the declared one: a size, or a name that stays symbolic. A dim inference did find is
never overridden, and an output another node reads keeps its inferred shape: a declaration
is the file's claim, so nothing is computed from it.
"""

from __future__ import annotations

from collections.abc import Sequence

from onnx import ValueInfoProto

from rlx.ir.graph import Graph
from rlx.ir.rewrite import Rewriter
from rlx.ir.shape import UNKNOWN, Dim, Shape

__all__ = ["with_declared_outputs", "declared_rank_misses"]


def with_declared_outputs(graph: Graph, declared: Sequence[ValueInfoProto]) -> Graph:
    """`graph` with its outputs' UNKNOWN dims taken from `declared` (one per output)."""
    sharper: dict[int, Shape] = {}
    users = graph.users()
    for node_id, value in zip(graph.outputs, declared):
        if users[node_id]:
            continue  # read inside the graph too: its readers' shapes rest on inference alone
        shape = graph.node(node_id).shape
        dims = _declared_dims(value)
        if isinstance(shape, Shape) and dims is not None and len(dims) == shape.rank:
            merged = shape.with_dims(d if d != UNKNOWN else n for d, n in zip(shape.dims, dims))
            if merged != shape:
                sharper[node_id] = merged
    if not sharper:
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes():
        if node.id in sharper:
            rw.substitute(node, node.op, rw.inputs(node), sharper[node.id])
        else:
            rw.copy(node)
    return rw.finish()


def declared_rank_misses(graph: Graph, declared: Sequence[ValueInfoProto]) -> int:
    """How many outputs have another rank than the file declares (ONNX Runtime only warns;
    rlx uses the count to choose between If branches of different ranks)."""
    misses = 0
    for node_id, value in zip(graph.outputs, declared):
        shape, dims = graph.node(node_id).shape, _declared_dims(value)
        misses += isinstance(shape, Shape) and dims is not None and len(dims) != shape.rank
    return misses


def _declared_dims(value: ValueInfoProto) -> list[Dim] | None:
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0
            else d.dim_param or UNKNOWN for d in tensor.shape.dim]
