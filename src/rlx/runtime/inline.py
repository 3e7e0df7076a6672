"""`inline_composites(graph)`: every `Composite` replaced by its body's nodes.

Why: the numpy engine runs a Composite's body anyway; spliced into the graph, it runs as
the importer's expansion did, without a subgraph call per node (6 us each, ~4% of an int8
CNN's run). The graph kept for export still has the Composites.
"""

from __future__ import annotations

from rlx.ir.graph import Graph
from rlx.ir.ops.elementwise import Identity
from rlx.ir.ops.sources import Constant, Input

__all__ = ["inline_composites"]


def inline_composites(graph: Graph) -> Graph:
    """`graph` (the same object when it has no single-output Composite) with the bodies of
    its single-output Composites spliced in, nested ones included."""
    if not any(n.op.subgraphs() for n in graph.nodes()):  # a Composite holds its body
        return graph
    from rlx.ir.ops.control import Composite  # here: a graph without one never imports it

    if not any(isinstance(n.op, Composite) for n in graph.nodes()):
        return graph
    from rlx.ir.rewrite import Rewriter  # nor the rewriter

    rw = Rewriter(graph)
    for node in graph.nodes():
        if not isinstance(node.op, Composite) or node.is_tuple:
            rw.copy(node)
            continue
        body = inline_composites(node.op.body)
        outer = iter(rw.inputs(node))
        last = body.outputs[0]
        ids: dict[int, int] = {}
        for inner in body.nodes():
            if isinstance(inner.op, Input):
                ids[inner.id] = next(outer)
                continue
            inputs = [ids[i] for i in inner.inputs]
            # shapes inferred again, in the outer graph's dims; the output node takes the
            # Composite's place (and name: it may be a graph output)
            shape = inner.shape if isinstance(inner.op, Constant) else None
            ids[inner.id] = rw.substitute(node, inner.op, inputs, shape) if inner.id == last \
                else rw.emit(inner.op, inputs, shape)
        if isinstance(body.node(last).op, Input):
            rw.substitute(node, Identity(), [ids[last]])
    return rw.finish()
