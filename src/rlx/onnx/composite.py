"""Foreign ops kept whole: `kept_whole(expand)` makes a converter's expansion the body of a
`Composite` node that remembers the ONNX node it came from.

Why: onnxruntime's int8 `com.microsoft` ops (QLinearAdd, QGemm, ...) expand into a dozen
rlx ops each; exported that way, onnxruntime runs hundreds of element-wise nodes instead of
its fused int8 kernels. Kept whole, the export writes the node back for an engine that has
it and the body for one that does not (`rlx.onnx.export`), and the numpy engine runs the
body, the arithmetic the expansion always had.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from rlx.ir import Composite
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import Converter, Outputs
from rlx.onnx.scope import Scope, finish_graph

__all__ = ["kept_whole"]


def kept_whole(expand: Converter) -> Converter:
    """A converter that emits `expand`'s IR as the body of a `Composite` of the node.

    Nodes whose inputs are all known at import are expanded in place (they fold away), as
    are nodes with an attribute that is not a number, a string or a list of them."""

    @functools.wraps(expand)
    def convert(n: NodeContext) -> Outputs:
        slots = [i for i in range(len(n.inputs)) if n.has(i)]
        attributes = _plain_attributes(n)
        if attributes is None or all(n.static(i) is not None for i in slots):
            return expand(n)
        body = _body(n, slots, expand)
        if body is None:
            return expand(n)
        op = Composite(n.proto.domain, n.op_type, attributes, tuple(slots), body)
        node = n.s.emit(op, *[n.input(i) for i in slots])
        return n.s.parts(node) if len(body.outputs) > 1 else node

    return convert


def _body(n: NodeContext, slots: list[int], expand: Converter):
    """`expand` run in a child scope whose Inputs stand for the node's given inputs, in
    order; one-element constants (scales, zero points) are read as copies, so the body is
    specialised to them. None when an output of the node is not produced."""
    scope = Scope(n.s.importer, f"{n.op_type}.body", n.s)
    for i in slots:
        name = n.inputs[i]
        known = n.static(i)
        formal = scope.graph.input(f"x{i}", n.s.shape(n.input(i)))
        copied = known is not None and np.asarray(known).size == 1
        scope.define(name, scope.const(np.asarray(known)) if copied else formal)
    results = expand(NodeContext(scope, n.proto, n.opset))
    found = [int(results)] if isinstance(results, (int, np.integer)) else list(results)
    outputs = [o for o in found if o is not None]
    if len(outputs) != len(n.outputs) or len(outputs) != len(found):
        return None
    return finish_graph(scope.graph, [(None, o) for o in outputs])


def _plain_attributes(n: NodeContext) -> tuple[tuple[str, Any], ...] | None:
    """The node's attributes as (name, value) pairs of numbers, strings or tuples of them."""
    pairs = []
    for name, value in sorted(n.attrs.items()):
        if isinstance(value, np.ndarray) or not _plain(value):
            return None
        pairs.append((name, tuple(value) if isinstance(value, list) else value))
    return tuple(pairs)


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, (int, float, str)) for v in value)
    return isinstance(value, (int, float, str))
