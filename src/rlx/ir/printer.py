"""A stable, readable text form of a graph (one line per node), for logs, diffs and tests."""

from __future__ import annotations

from collections.abc import Mapping

from rlx.ir.graph import Graph, Node
from rlx.ir.ops.sources import Constant
from rlx.ir.serialize import enum_text

__all__ = ["format_node", "format_graph"]


def format_node(node: Node, body: str | None = None) -> str:
    """`node` on one line; `body`, when given, stands in for its op (a reader's words for
    it: a stripped constant's weight table row, say)."""
    op = node.op
    if body is not None:
        pass
    elif isinstance(op, Constant):
        body = f"Constant(<{op.nbytes} bytes{', stripped' if op.is_stripped else ''}>)"
    else:
        attrs = ", ".join(f"{k}={_render(v)}" for k, v in op.attrs().items() if v is not None)
        body = f"{type(op).__name__}({attrs})" if attrs else type(op).__name__
    args = ", ".join(f"%{i}" for i in node.inputs)
    notes = [n for n in (node.name, None if node.origin in (None, node.name)
                         else f"from {node.origin}") if n is not None]
    name = f"  # {'; '.join(notes)}" if notes else ""
    shape = _shape_text(node.shape)
    return f"%{node.id}: {shape} = {body}({args}){name}" if args else \
        f"%{node.id}: {shape} = {body}{name}"


def format_graph(graph: Graph, indent: str = "",
                 bodies: Mapping[int, str] | None = None) -> str:
    """The graph, subgraphs indented under their node; `bodies` replaces the op text of
    some top-graph nodes by id (see `format_node`)."""
    bodies = bodies or {}
    lines = [f"{indent}graph {graph.name!r} {{"]
    for node in graph.nodes():
        lines.append(f"{indent}  {format_node(node, bodies.get(node.id))}")
        for sub in node.op.subgraphs():
            lines.append(format_graph(sub, indent + "    "))
    outs = ", ".join(f"%{o}" for o in graph.outputs)
    lines.append(f"{indent}  return {outs}")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def _shape_text(shape) -> str:
    if isinstance(shape, tuple):
        return "(" + ", ".join(str(s) for s in shape) + ")"
    return str(shape)


def _render(value) -> str:
    if isinstance(value, Graph):
        return f"<graph {value.name!r}>"
    if hasattr(value, "value") and hasattr(type(value), "__members__"):
        return enum_text(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    return repr(value)
