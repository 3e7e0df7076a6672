"""The converter table: ONNX op type (default domain) -> function emitting rlx IR.

A converter takes a `NodeContext` and returns the node id of its single output, or a
sequence with one entry per ONNX output (None where an output was not asked for). It
resolves every opset and attribute quirk of its op, so the IR never sees opset versions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlx.onnx.node import NodeContext

__all__ = ["Outputs", "Converter", "CONVERTERS", "NEVER_EXPANDED", "converter"]

Outputs = int | Sequence[int | None]
Converter = Callable[["NodeContext"], Outputs]

CONVERTERS: dict[str, Converter] = {}

DOMAIN_CONVERTERS: dict[str, dict[str, Converter]] = {}
"""Converters of ops outside the default domain: domain -> op type -> converter
(`com.microsoft` is onnxruntime's contrib-op domain)."""

MICROSOFT = "com.microsoft"

NEVER_EXPANDED = frozenset({
    "Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
    "RandomUniformLike",
})
"""Ops not converted at all, not even through their ONNX function body: they draw random
numbers, which a baked, deterministic graph cannot reproduce."""


def converter(*op_types: str, domain: str = "") -> Callable[[Converter], Converter]:
    """Register a converter for one or more op types of `domain` (default: ONNX's)."""
    table = CONVERTERS if domain == "" else DOMAIN_CONVERTERS.setdefault(domain, {})

    def register(fn: Converter) -> Converter:
        for op_type in op_types:
            assert op_type not in table, (domain, op_type)
            table[op_type] = fn
        return fn

    return register


def find_converter(domain: str, op_type: str) -> Converter | None:
    """The converter of `op_type` in `domain` ("" for ONNX's), or None."""
    if domain == "":
        return CONVERTERS.get(op_type)
    return DOMAIN_CONVERTERS.get(domain, {}).get(op_type)
