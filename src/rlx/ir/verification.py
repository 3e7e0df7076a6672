"""`verify(graph)`: the well-formedness check every pass's output must pass.

Checks topological order, known ops and arity, unique names, tuple-valued nodes read only
through `TupleGet`, outputs that exist, and that each node's declared shape agrees with what
inference derives from its inputs. Subgraphs are verified recursively.
"""

from __future__ import annotations

from rlx.errors import GraphError, ShapeError
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.base import OPS, OutShape
from rlx.ir.ops.multi import TupleGet
from rlx.ir.ops.sources import Constant
from rlx.ir.shape import Shape

__all__ = ["verify"]


def verify(graph: Graph) -> None:
    """Raise `GraphError` (or `ShapeError`) naming the first node at fault. A graph that
    passed and has not changed since is not checked again (a file's graph is verified when
    it is read, then compiled)."""
    if graph.verified_as is not None and graph.verified_as == _stamp(graph):
        return
    _check(graph)
    graph.verified_as = _stamp(graph)


def _stamp(graph: Graph) -> tuple:
    return len(graph), tuple(graph.outputs)


def _check(graph: Graph) -> None:
    names: set[str] = set()
    inferred: dict[tuple, OutShape] = {}  # `_check_shape`'s, by op and input shape objects
    for position, node in enumerate(graph.nodes()):
        if node.id != position:
            raise GraphError(f"{_where(graph, node)}: id {node.id} at position {position}")
        if OPS.get(type(node.op).__name__) is not type(node.op):
            raise GraphError(f"{_where(graph, node)}: unknown op {type(node.op).__name__}")
        for i in node.inputs:
            if not 0 <= i < node.id:
                raise GraphError(f"{_where(graph, node)}: input %{i} is not an earlier node "
                                 "(topological order)")
            if graph.node(i).is_tuple and not isinstance(node.op, TupleGet):
                raise GraphError(f"{_where(graph, node)}: reads tuple-valued %{i} without "
                                 "TupleGet")
        lo, hi = node.op.arity
        if len(node.inputs) < lo or (hi is not None and len(node.inputs) > hi):
            raise GraphError(f"{_where(graph, node)}: {len(node.inputs)} inputs, op takes "
                             f"{lo}..{hi}")
        if node.name is not None:
            if node.name in names:
                raise GraphError(f"{_where(graph, node)}: duplicate name {node.name!r}")
            names.add(node.name)
        _check_shape(graph, node, inferred)
        for sub in node.op.subgraphs():
            verify(sub)
    for o in graph.outputs:
        if not 0 <= o < len(graph):
            raise GraphError(f"graph {graph.name!r}: output %{o} does not exist")
        if graph.node(o).is_tuple:
            raise GraphError(f"graph {graph.name!r}: output %{o} is tuple-valued; "
                             "output its parts through TupleGet")


def _where(graph: Graph, node: Node) -> str:
    """How a message names the node at fault (made only for a message: a node's label is
    a few strings formatted)."""
    return f"graph {graph.name!r} node {node.label}"


def _check_shape(graph: Graph, node: Node, inferred: dict[tuple, OutShape]) -> None:
    """The node's declared shape against inference from its inputs. Nodes that share an op
    object and their inputs' shape objects infer once (`inferred`): a file's graph shares
    both among repeated layers (`rlx.ir.serialize`), and inference is a function of them."""
    if isinstance(node.op, Constant):
        nbytes = node.tensor_shape.nbytes
        if not node.op.is_stripped and nbytes is not None and node.op.nbytes != nbytes:
            raise ShapeError(f"{_where(graph, node)}: payload {node.op.nbytes} bytes, shape "
                             f"{node.shape} needs {nbytes}")
        return
    if node.op.arity == (0, 0):
        return  # leaves declare their shape
    key = (id(node.op), *[id(graph.node(i).shape) for i in node.inputs])
    found = inferred.get(key)
    if found is None:
        try:
            found = inferred[key] = graph.infer(node.op, node.inputs)
        except ShapeError as err:
            raise ShapeError(f"{_where(graph, node)}: {err}") from None
    if not _agrees(node.shape, found):
        raise ShapeError(f"{_where(graph, node)}: declared {_fmt(node.shape)}, inference "
                         f"gives {_fmt(found)}")


def _agrees(declared, inferred) -> bool:
    if isinstance(declared, tuple) or isinstance(inferred, tuple):
        return (
            isinstance(declared, tuple)
            and isinstance(inferred, tuple)
            and len(declared) == len(inferred)
            and all(_agrees(d, i) for d, i in zip(declared, inferred))
        )
    return _compatible(declared, inferred)


def _compatible(declared: Shape, inferred: Shape) -> bool:
    """Same dtype and rank; a symbolic dim on either side may stand for any size."""
    return (
        declared.dtype == inferred.dtype
        and declared.rank == inferred.rank
        and all(
            d == i or isinstance(d, str) or isinstance(i, str)
            for d, i in zip(declared.dims, inferred.dims)
        )
    )


def _fmt(shape) -> str:
    if isinstance(shape, tuple):
        return "(" + ", ".join(str(s) for s in shape) + ")"
    return str(shape)
