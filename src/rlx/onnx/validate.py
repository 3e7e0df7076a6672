"""Checks of a node against its ONNX schema, before a converter reads it.

A model is untrusted input: a required attribute may be missing, an attribute may have the
wrong type (a string `axis`, a graph attribute that is no graph), names may not be text.
These become `ModelImportError`s naming the node here, so converters can rely on what the
schema promises.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import onnx
import onnx.defs
from onnx import AttributeProto, NodeProto

from rlx.errors import ModelImportError

__all__ = ["check_node", "check_text", "check_model_text"]

# a value of the first kind stands for one of the second (an exporter writing alpha=1)
_WIDENS = {(AttributeProto.INT, AttributeProto.FLOAT), (AttributeProto.INTS,
                                                       AttributeProto.FLOATS)}


@functools.lru_cache(maxsize=1024)
def _attributes(op_type: str, opset: int) -> dict[str, tuple[int, bool]] | None:
    """Attribute name -> (AttributeProto type, required) of the op at `opset`."""
    schema: Any  # onnx's stubs type attribute types as an enum int() does not take
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    return {name: (int(a.type), bool(a.required)) for name, a in schema.attributes.items()}


def check_text(node: NodeProto, label: str) -> None:
    """Names, op type and domain must be text (protobuf hands back bytes when not UTF-8)."""
    fields = [node.op_type, node.domain, node.name, *node.input, *node.output,
              *(a.name for a in node.attribute)]
    if not all(isinstance(f, str) for f in fields):
        raise ModelImportError(f"{label}: a name, op type or domain is not UTF-8 text")


def _texts(graph) -> Iterator[object]:
    """Every name in `graph` and the graphs nested in it (a stack, not recursive generators,
    whose `yield from` chains cost each name once per level of nesting)."""
    pending = [graph]
    while pending:
        graph = pending.pop()
        yield graph.name
        for value in (*graph.input, *graph.output, *graph.value_info):
            yield value.name
            if value.type.WhichOneof("value") == "tensor_type":
                yield from (d.dim_param for d in value.type.tensor_type.shape.dim)
        yield from (t.name for t in graph.initializer)
        for node in graph.node:
            yield from (node.op_type, node.domain, node.name, *node.input, *node.output)
            for attr in node.attribute:
                yield attr.name
                if attr.type == AttributeProto.GRAPH:
                    pending.append(attr.g)
                elif attr.type == AttributeProto.GRAPHS:
                    pending.extend(attr.graphs)


def check_model_text(model: onnx.ModelProto) -> None:
    """All names, op types, domains and dim names of the model are text: protobuf hands
    back bytes for a string field that is not UTF-8, which nothing downstream expects."""
    if not all(isinstance(text, str) for text in _texts(model.graph)):
        raise ModelImportError("a name, op type, domain or dim name in the model is not "
                               "UTF-8 text")
    for function in model.functions:
        for node in function.node:
            check_text(node, f"function {function.name!r}")


def check_node(node: NodeProto, opset: int, label: str) -> None:
    """Required attributes present, every attribute of the schema's type."""
    check_text(node, label)
    spec = _attributes(node.op_type, opset)
    if spec is None:
        return
    given = {a.name: a for a in node.attribute}
    for name, (kind, required) in spec.items():
        attr = given.get(name)
        if attr is None:
            if required:
                raise ModelImportError(f"{label}: attribute {name!r} is required")
            continue
        if attr.type != kind and (attr.type, kind) not in _WIDENS:
            want = AttributeProto.AttributeType.Name(kind).lower()
            got = AttributeProto.AttributeType.Name(attr.type).lower() \
                if attr.type in AttributeProto.AttributeType.values() else str(attr.type)
            raise ModelImportError(f"{label}: attribute {name!r} must be {want}, got {got}")
