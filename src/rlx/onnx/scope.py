"""`Scope`: the rlx graph built for one ONNX graph, and the names visible in it.

The model's graph and every subgraph (If branches, Loop and Scan bodies) get a scope.
Initializers are bound lazily: a converter that needs an initializer's *value* (a shape, an
axis list) reads it without making a node, and one that needs it as a tensor gets a `Param`
(top level, value in the bindings) or a `Constant` (inside a subgraph).

Subgraphs capture nothing implicitly: an outer value a subgraph uses becomes one of its
`Input`s and an extra ("captured") input of the control-flow node, in first-use order.
Small outer constants are copied in instead, so their values stay known at import.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from onnx import AttributeProto, GraphProto

from rlx.errors import ModelImportError
from rlx.ir import DType, Graph, Identity, Input, Param, Shape
from rlx.onnx.emit import Emitter

if TYPE_CHECKING:
    from rlx.onnx.importer import Importer

__all__ = ["Scope", "Subgraph", "finish_graph", "free_variables", "subgraph_attributes"]

INLINE_CONSTANT_BYTES = 4096
"""Outer constants up to this size are copied into a subgraph rather than captured."""


class Scope(Emitter):
    """The graph under construction for one ONNX graph: ONNX value name -> node id, the
    graph's initializers, and (for a subgraph) the scope around it."""

    def __init__(self, importer: Importer, name: str, parent: Scope | None = None):
        self.importer = importer
        self.graph = Graph(name)
        self.parent = parent
        self.values: dict[str, int] = {}
        self.initializers: dict[str, np.ndarray] = {}
        self.outer_static: dict[str, np.ndarray] = {}  # captured values known at import

    def define(self, name: str, node_id: int) -> None:
        self.values[name] = node_id

    def visible(self) -> set[str]:
        """Every name this scope (and the scopes around it) can read."""
        names: set[str] = set()
        scope: Scope | None = self
        while scope is not None:
            names.update(scope.values, scope.initializers)
            scope = scope.parent
        return names

    def get(self, name: str) -> int:
        """The node id of a value, creating the initializer's node on first use."""
        node_id = self.values.get(name)
        if node_id is not None:
            return node_id
        array = self.initializers.get(name)
        if array is None:
            raise ModelImportError(f"graph {self.graph.name!r}: value {name!r} is not defined")
        if self.parent is None:
            shape = Shape(array.shape, DType.from_numpy(array.dtype))
            node_id = self.graph.add_node(Param(name), (), shape, name=name)
            self.importer.bindings[name] = array
        else:
            node_id = self.const(array)
        self.values[name] = node_id
        return node_id

    def value(self, node_id: int) -> np.ndarray | None:
        """Constants and initializer Params are known at import (shape arithmetic on them
        folds; converters read shape-like operands from them)."""
        node = self.graph.node(node_id)
        if isinstance(node.op, Param):
            return self.initializers.get(node.op.name)
        return super().value(node_id)

    def static(self, name: str) -> np.ndarray | None:
        """A value known at import (initializer, Constant, captured constant), else None."""
        if name in self.initializers:
            return self.initializers[name]
        if name in self.outer_static:
            return self.outer_static[name]
        node_id = self.values.get(name)
        return None if node_id is None else self.value(node_id)


class Subgraph:
    """An ONNX subgraph converted in a child scope: the graph, the outer values it captured
    (to pass as extra inputs of the control-flow node, in this order) and the ids of the
    subgraph `Input`s that receive them."""

    def __init__(self, graph: Graph, captured: list[int], capture_inputs: list[int]):
        self.graph = graph
        self.captured = captured
        self.capture_inputs = capture_inputs

    def output_shapes(self) -> list[Shape]:
        return [self.graph.node(o).tensor_shape for o in self.graph.outputs]

    @classmethod
    def convert(cls, parent: Scope, body: GraphProto, shapes: Sequence[Shape], name: str,
                free: Sequence[str] | None = None, capture_at: int | None = None) -> Subgraph:
        """Convert `body` with its declared inputs given `shapes`.

        Outer values it reads (or `free`, to give several subgraphs the same capture list)
        become captured inputs, placed after the first `capture_at` declared inputs (after
        all of them by default)."""
        if len(shapes) != len(body.input):
            raise ModelImportError(f"subgraph {name!r} declares {len(body.input)} inputs, "
                                   f"its op passes {len(shapes)}")
        return parent.importer.branch_ranks.settle(
            lambda: cls._convert(parent, body, shapes, name, free, capture_at))

    @classmethod
    def _convert(cls, parent: Scope, body: GraphProto, shapes: Sequence[Shape], name: str,
                 free: Sequence[str] | None, capture_at: int | None) -> Subgraph:
        scope = Scope(parent.importer, name, parent)
        declared = list(zip(body.input, shapes))
        at = len(declared) if capture_at is None else capture_at
        for value, shape in declared[:at]:
            scope.define(value.name, scope.graph.input(value.name, shape))
        captured, capture_inputs = [], []
        for var in parent.importer.free_variables(body) if free is None else free:
            known = parent.static(var)
            if known is not None and known.nbytes <= INLINE_CONSTANT_BYTES:
                scope.define(var, scope.const(known))
                continue
            outer = parent.get(var)
            capture_inputs.append(scope.graph.input(var, parent.shape(outer)))
            scope.define(var, capture_inputs[-1])
            captured.append(outer)
            if known is not None:
                scope.outer_static[var] = known
        for value, shape in declared[at:]:
            scope.define(value.name, scope.graph.input(value.name, shape))
        parent.importer.convert_graph_body(scope, body)
        graph = finish_graph(scope.graph, [(None, scope.get(o.name)) for o in body.output])
        # Inputs keep their positions among the Inputs (the op binds them by order)
        inputs = {n.source_name: n.id for n in graph.inputs()}
        return cls(graph, captured, [inputs[scope.graph.node(i).source_name]
                                     for i in capture_inputs])


def subgraph_attributes(node) -> Iterable[GraphProto]:
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == AttributeProto.GRAPHS:
            yield from attr.graphs


def free_variables(graph: GraphProto, memo: dict[int, tuple] | None = None) -> list[str]:
    """Names `graph` (or a graph nested in it) reads but does not define, in first-use order.

    `memo` (id -> (graph, names), the graph kept so its id stays its own) lets an import
    compute each nested graph's names once: without it, sorting every level of a deep
    If-nesting recomputed the levels below it (quadratic in the depth)."""
    if memo is not None:
        found = memo.get(id(graph))
        if found is not None and found[0] is graph:
            return found[1]
    defined = {v.name for v in graph.input}
    defined |= {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    for node in graph.node:
        defined.update(o for o in node.output if o)
    free: dict[str, None] = {}
    for node in graph.node:
        used = [*node.input, *(v for g in subgraph_attributes(node)
                               for v in free_variables(g, memo))]
        for name in used:
            if name and name not in defined:
                free.setdefault(name)
    for value in graph.output:
        if value.name not in defined:
            free.setdefault(value.name)
    names = list(free)
    if memo is not None:
        memo[id(graph)] = (graph, names)
    return names


# -- the finished graph ------------------------------------------------------------------------
def finish_graph(graph: Graph, outputs: Sequence[tuple[str | None, int]]) -> Graph:
    """`graph` with only the nodes its outputs need (and every Input), outputs named after
    their ONNX values where a name is given (a copy, unless nothing is dropped or renamed).

    Converting leaves dead nodes behind (constants that shape arithmetic used, values no
    output reads). An unnamed output node takes its output's name; one already named (an
    input, a param, or another output) is passed through an `Identity` carrying the name.
    """
    live = [isinstance(n.op, Input) for n in graph.nodes()]
    for _, node_id in outputs:
        live[node_id] = True
    for node in reversed(graph.nodes()):
        if live[node.id]:
            for i in node.inputs:
                live[i] = True
    names: dict[int, str] = {}
    extra: list[tuple[str, int]] = []
    for name, node_id in outputs:
        current = graph.node(node_id).name
        if name is None or current == name:
            continue
        if current is None and node_id not in names:
            names[node_id] = name
        else:
            extra.append((name, node_id))
    if all(live) and not names and not extra:
        graph.set_outputs(node_id for _, node_id in outputs)
        return graph
    out = Graph(graph.name)
    new_id: dict[int, int] = {}
    for node in graph.nodes():
        if live[node.id]:
            new_id[node.id] = out.add_node(node.op, (new_id[i] for i in node.inputs),
                                           node.shape, names.get(node.id, node.name),
                                           node.origin)
    renamed = {name: out.add_node(Identity(), (new_id[node_id],), graph.node(node_id).shape,
                                  name) for name, node_id in extra}
    out.set_outputs(new_id[node_id] if name is None else renamed.get(name, new_id[node_id])
                    for name, node_id in outputs)
    return out
