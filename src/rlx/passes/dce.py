"""Dead-code elimination: keep what the outputs need, plus every `Input`.

Inputs stay even when nothing reads them, so the graph's signature (what `run` must be fed)
never changes. One backward sweep over the node list: O(nodes + edges).
"""

from __future__ import annotations

import logging

from rlx.ir.graph import Graph
from rlx.ir.ops.sources import Input
from rlx.ir.rewrite import Rewriter

__all__ = ["eliminate_dead_code"]

log = logging.getLogger(__name__)


def eliminate_dead_code(graph: Graph) -> tuple[Graph, int]:
    """Drop nodes no output depends on; returns (graph, nodes removed)."""
    live = _live(graph)
    rw = Rewriter(graph)
    removed = 0
    for node in graph.nodes():
        if live[node.id]:
            rw.copy(node)
        else:
            rw.drop(node.id)
            removed += 1
            log.debug("dce: removed %s", node.label)
    log.info("dce %r: %d of %d node(s) removed", graph.name, removed, len(graph))
    return rw.finish(), removed


def _live(graph: Graph) -> list[bool]:
    nodes = graph.nodes()
    live = [isinstance(n.op, Input) for n in nodes]
    for o in graph.outputs:
        live[o] = True
    # inputs come before their readers, so one reverse pass sees every reader first
    for node in reversed(nodes):
        if live[node.id]:
            for i in node.inputs:
                live[i] = True
    return live
