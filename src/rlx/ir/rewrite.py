"""Build a new graph from an old one, node by node, without touching the old one.

Every pass follows the same pattern: walk the source graph in order and, for each node,
either `copy` it (inputs remapped, same op, shape and name), `substitute` a new node for it
(which takes over its name), `replace` it by a node already emitted, or `drop` it. `finish`
remaps the outputs (a graph output keeps its position) and returns the SOURCE graph itself
when nothing changed, so callers can test `new is old`.

A pass that changes nothing costs no new graph: until the first change, copied nodes keep
their ids and the new graph is the source's prefix, built only when something changes.

Names belong to nodes: a copied or substituted node keeps its name, a node replaced by an
existing one or dropped takes its name with it. Origins (the source-model node, see
`Node.origin`) flow the same way, and the new nodes emitted for a source node that is then
substituted or replaced take its origin, so a fused or packed node still names the ONNX
node the user knows. Node ids are positions and shift when nodes
are dropped; names are the stable identities that survive passes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlx.errors import GraphError
from rlx.ir.graph import Graph, Node, ShapeLike
from rlx.ir.ops.base import Op
from rlx.ir.ops.sources import Constant
from rlx.payload import Payload

__all__ = ["Rewriter", "Rule", "rewrite_nodes", "constant_payload", "constant_value"]


def constant_value(node: Node) -> np.ndarray | None:
    """The read-only array of a Constant node, or None (not a Constant, or bytes stripped)."""
    if not _has_values(node):
        return None
    assert isinstance(node.op, Constant) and not isinstance(node.shape, tuple)
    return node.op.array(node.shape)


def constant_payload(node: Node) -> Payload | None:
    """As `constant_value`, but a deferred payload stays unread: a check over a large
    weight reads it in blocks (`rlx.deferred.row_blocks`) instead of whole."""
    if not _has_values(node):
        return None
    assert isinstance(node.op, Constant) and not isinstance(node.shape, tuple)
    return node.op.payload(node.shape)


def _has_values(node: Node) -> bool:
    op = node.op
    return isinstance(op, Constant) and not isinstance(node.shape, tuple) \
        and node.shape.is_static and not (op.is_stripped and node.shape.nbytes != 0)


class Rewriter:
    """A new graph under construction plus the map from source node ids to new ids."""

    def __init__(self, source: Graph):
        self.source = source
        self._target: Graph | None = None  # None: every node so far copied, ids unchanged
        self._ids: dict[int, int | None] = {}
        self.changed = False
        self._unclaimed = 0  # target nodes from here on were emitted for no source node yet

    @property
    def target(self) -> Graph:
        """The new graph (for reading it by new ids: the source itself while nothing changed)."""
        return self.source if self._target is None else self._target

    def _building(self) -> Graph:
        """The new graph as a real one: the unchanged prefix copied out on first need."""
        if self._target is None:
            self._target = Graph(self.source.name)
            for old_id in range(len(self._ids)):
                node = self.source.node(old_id)
                self._target.add_node(node.op, node.inputs, node.shape, node.name, node.origin)
            self._unclaimed = len(self._target)
        return self._target

    # -- reading ----------------------------------------------------------------------------
    def id(self, old_id: int) -> int:
        """The new id standing for source node `old_id` (which must be mapped already)."""
        try:
            new_id = self._ids[old_id]
        except KeyError:
            raise GraphError(
                f"rewrite of {self.source.name!r}: %{old_id} not visited yet") from None
        if new_id is None:
            raise GraphError(f"rewrite of {self.source.name!r}: %{old_id} was dropped but is read")
        return new_id

    def node(self, old_id: int) -> Node:
        """The node of the NEW graph standing for source node `old_id`.

        Rules look at inputs through this, so they see earlier rewrites (chains compose).
        """
        return self.target.node(self.id(old_id))

    def inputs(self, node: Node) -> tuple[int, ...]:
        """New ids of a source node's inputs."""
        return tuple(self.id(i) for i in node.inputs)

    def fresh_name(self, base: str) -> str:
        """`base`, or `base.1`, `base.2`, ...: a name used by no node of either graph."""
        name, n = base, 0
        while self.source.find(name) is not None or self.target.find(name) is not None:
            n += 1
            name = f"{base}.{n}"
        return name

    # -- building ---------------------------------------------------------------------------
    def copy(self, node: Node) -> int:
        """Re-emit a source node unchanged except for its remapped inputs."""
        if self._target is None and node.id == len(self._ids):  # still the source's prefix
            self._ids[node.id] = node.id
            return node.id
        target = self._building()
        new_id = target.add_node(node.op, self.inputs(node), node.shape, node.name, node.origin)
        self._ids[node.id] = new_id
        self._unclaimed = len(target)
        return new_id

    def emit(self, op: Op, inputs: tuple[int, ...] | list[int], shape: ShapeLike | None = None,
             name: str | None = None) -> int:
        """A brand-new node over NEW ids (maps no source node)."""
        self.changed = True
        return self._building().add_node(op, inputs, shape, name)

    def emit_constant(self, array: Payload, name: str | None = None) -> int:
        """A new Constant holding `array`'s bytes (a view when it is contiguous, or the
        `Deferred` array itself)."""
        self.changed = True
        return self._building().constant(array, name=name)

    def replace(self, old_id: int, new_id: int) -> None:
        """Let an already emitted node stand for source node `old_id` from now on."""
        self.changed = True
        self._building()
        self._ids[old_id] = new_id
        self._claim(self.source.node(old_id).origin)

    def _claim(self, origin: str | None) -> None:
        self.target.claim_origin(self._unclaimed, origin)
        self._unclaimed = len(self.target)

    def substitute(self, node: Node, op: Op, inputs: tuple[int, ...] | list[int],
                   shape: ShapeLike | None = None) -> int:
        """Emit `op` over NEW ids in place of `node`; the new node takes `node`'s name."""
        new_id = self.emit(op, inputs, shape, node.name)
        self._ids[node.id] = new_id
        self._claim(node.origin)
        return new_id

    def substitute_constant(self, node: Node, array: Payload) -> int:
        """A Constant holding `array` in place of `node`, under `node`'s name."""
        new_id = self.emit_constant(array, node.name)
        self._ids[node.id] = new_id
        self._claim(node.origin)
        return new_id

    def drop(self, old_id: int) -> None:
        """Leave source node `old_id` out (reading it later is an error)."""
        self.changed = True
        self._building()
        self._ids[old_id] = None

    def finish(self) -> Graph:
        """The new graph with outputs remapped, or the source graph if nothing changed."""
        assert len(self._ids) == len(self.source), "every source node must be visited"
        if not self.changed:
            return self.source
        self.target.set_outputs(self.id(o) for o in self.source.outputs)
        return self.target


Rule = Callable[[Rewriter, Node], bool]
"""Handle one source node: map it (substitute/replace/drop) and return True, or return False
to have it copied unchanged."""


def rewrite_nodes(graph: Graph, rule: Rule) -> tuple[Graph, int]:
    """Apply `rule` to every node in order; returns (new graph, number of nodes it handled)."""
    rw = Rewriter(graph)
    count = 0
    for node in graph.nodes():
        if rule(rw, node):
            count += 1
        else:
            rw.copy(node)
    return rw.finish(), count
