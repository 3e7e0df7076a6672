"""`NodeContext`: one ONNX node as its converter sees it.

Inputs are read by position (an empty name is an omitted optional input), attributes are
decoded once, and errors name the node so a user can find it in the model.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from onnx import NodeProto

from rlx.enums import parse_enum
from rlx.errors import ModelImportError
from rlx.onnx.tensors import decode_attribute

if TYPE_CHECKING:
    from rlx.onnx.scope import Scope

__all__ = ["NodeContext", "node_label", "node_origin"]


def node_origin(proto: NodeProto) -> str:
    """What the IR nodes made from an ONNX node record as their origin: its name, else its
    first output (the name Netron and onnxruntime show for an unnamed node), else its op."""
    return proto.name or next((o for o in proto.output if o), "") or proto.op_type


def node_label(proto: NodeProto) -> str:
    """How messages name an ONNX node: by name, else by its first output."""
    if proto.name:
        return f"node {proto.name!r} ({proto.op_type})"
    first = next((o for o in proto.output if o), "")
    return f"{proto.op_type} node producing {first!r}" if first else f"{proto.op_type} node"


E = TypeVar("E", bound=enum.Enum)


class NodeContext:
    """The converter's view of one node: `s` is the scope that receives the IR nodes."""

    def __init__(self, scope: Scope, proto: NodeProto, opset: int):
        self.s = scope
        self.proto = proto
        self.op_type = proto.op_type
        self.opset = opset
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        self.label = node_label(proto)
        external = scope.importer.external
        self.attrs: dict[str, Any] = {
            a.name: decode_attribute(a, external, self.label) for a in proto.attribute}

    def fail(self, message: str) -> ModelImportError:
        return ModelImportError(f"{self.label}: {message}")

    # -- inputs ------------------------------------------------------------------------------
    def has(self, i: int) -> bool:
        """Whether optional input `i` was given."""
        return i < len(self.inputs) and self.inputs[i] != ""

    def input(self, i: int) -> int:
        if not self.has(i):
            raise self.fail(f"required input {i} is missing")
        return self.s.get(self.inputs[i])

    def optional(self, i: int) -> int | None:
        return self.input(i) if self.has(i) else None

    def all_inputs(self) -> list[int]:
        return [self.input(i) for i in range(len(self.inputs))]

    def produced_by(self, i: int) -> str | None:
        """The op type of the node that writes input `i` (None for inputs and weights)."""
        return self.s.importer.producers.get(self.inputs[i]) if self.has(i) else None

    def static(self, i: int) -> np.ndarray | None:
        """Input `i`'s value when known at import (initializer or Constant), else None."""
        return self.s.static(self.inputs[i]) if self.has(i) else None

    def static_ints(self, i: int) -> tuple[int, ...] | None:
        value = self.static(i)
        return None if value is None else tuple(int(v) for v in value.reshape(-1))

    def static_scalar(self, i: int, default=None):
        """A one-element input as a Python number; `default` when omitted; error if dynamic."""
        if not self.has(i):
            return default
        value = self.static(i)
        if value is None:
            raise self.fail(f"input {i} ({self.inputs[i]!r}) must be a constant")
        if value.size != 1:
            raise self.fail(f"input {i} ({self.inputs[i]!r}) must hold one value, "
                            f"got shape {list(value.shape)}")
        return value.reshape(()).item()

    # -- attributes and outputs --------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def enum_attr(self, cls: type[E], name: str, default: str, *, exact: bool = True) -> E:
        """Attribute `name` as the member of `cls` it spells (ONNX's exact spelling unless
        `exact=False`), or a ModelImportError naming the value."""
        return parse_enum(cls, self.attr(name, default),
                          lambda text: self.fail(f"unknown {name} {text!r}"), exact=exact)

    def wants(self, i: int) -> bool:
        """Whether output `i` is used (present and named)."""
        return i < len(self.outputs) and self.outputs[i] != ""
