"""Refusal of onnxruntime's hardware-specific layouts.

At ORT_ENABLE_ALL onnxruntime's optimizer rewrites convolutions into its NCHWc layout
(`com.microsoft.nchwc` ops between `ReorderInput` / `ReorderOutput`): channels blocked by
the vector width of the CPU that saved the file, weights pre-reordered for its kernels.
onnxruntime itself warns that such a file should only run where it was optimised, so rlx
does not guess the block layout: it names the level that keeps a portable graph.
"""

from __future__ import annotations

from collections.abc import Iterable

from onnx import GraphProto, NodeProto

from rlx.errors import UnsupportedOpError
from rlx.onnx.scope import subgraph_attributes

__all__ = ["NCHWC_DOMAIN", "refuse_layouts"]

NCHWC_DOMAIN = "com.microsoft.nchwc"


def _nodes(graph: GraphProto) -> Iterable[NodeProto]:
    for node in graph.node:
        yield node
        for sub in subgraph_attributes(node):
            yield from _nodes(sub)


def refuse_layouts(graph: GraphProto) -> None:
    """Raise one clear error when the graph holds NCHWc-layout ops."""
    found = sorted({f"{n.domain}.{n.op_type}" for n in _nodes(graph)
                    if n.domain == NCHWC_DOMAIN})
    if found:
        raise UnsupportedOpError(found, where=f"ONNX model {graph.name!r}", notes=[
            "onnxruntime's ORT_ENABLE_ALL level wrote its CPU-specific NCHWc layout; save "
            "the model at ORT_ENABLE_EXTENDED instead (SessionOptions.graph_optimization_"
            "level) for a portable graph"])
