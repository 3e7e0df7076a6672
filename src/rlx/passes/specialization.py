"""Specialize: bind weight values to `Param`s, turning each bound one into a `Constant`.

The Constant keeps the Param's node name and position, so the weight's identity survives
every later pass. A binding must have the Param's dtype exactly (Python lists and scalars
are converted to it) and either the Param's shape or, flat, its element count; anything else
is a `BindingError` naming the Param. Symbolic dims of a Param are fixed by the binding's
shape. Arrays that are already C-contiguous little-endian in the right dtype are used
without copying (the Constant is a view, or for a large view of a weights file a
`FileView` that reads it from the file). Bindings that name no Param are ignored here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlx.deferred import Deferred, Payload, compute, defer
from rlx.errors import BindingError, GraphError
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.sources import Param
from rlx.ir.rewrite import Rewriter, rewrite_nodes
from rlx.ir.shape import UNKNOWN, Shape

__all__ = ["specialize"]

log = logging.getLogger(__name__)


def specialize(graph: Graph, bindings: Mapping[str, Any]) -> tuple[Graph, int]:
    """Replace every bound Param by a Constant of its value; returns (graph, params bound)."""

    def bind(rw: Rewriter, node: Node) -> bool:
        if not isinstance(node.op, Param) or node.op.name not in bindings:
            return False
        value = bound_value(node, bindings[node.op.name])
        rw.substitute_constant(node, value)
        log.debug("specialize: param %r bound to %s[%s]", node.op.name,
                  node.tensor_shape.dtype, ", ".join(map(str, value.shape)))
        return True

    new, count = rewrite_nodes(graph, bind)
    log.info("specialize %r: %d param(s) bound, %d left unbound", graph.name, count,
             sum(isinstance(n.op, Param) for n in new.nodes()))
    return new, count


def bound_value(node: Node, value: Any) -> Payload:
    """`value` as an array of the Param's dtype and (concrete) shape, or a `BindingError`.

    A large view of a mapped weights file comes back deferred (`rlx.deferred.defer`), and
    a conversion of a large array is deferred too: the bake holds no weight it is not
    looking at."""
    assert isinstance(node.op, Param)
    shape: Shape = node.tensor_shape
    want = shape.dtype.numpy
    if not isinstance(value, (np.ndarray, Deferred)):
        try:
            value = np.asarray(value, dtype=want)
        except (TypeError, ValueError, OverflowError) as err:
            raise BindingError(
                f"binding for param {node.op.name!r}: cannot convert to {shape.dtype}: {err}"
            ) from None
    elif value.dtype != want and (value.dtype.newbyteorder("<") == want.newbyteorder("<")
                                  or _widens_losslessly(value.dtype, want)):
        # big-endian (payloads are little-endian), or e.g. an f16 checkpoint for an f32
        # graph: exact either way
        value = compute(_converted, (value,), (want,), value.shape, want, rowwise=True)
    if value.dtype != want:
        raise _mismatch(node, value, f"dtype {_dtype_text(value.dtype)}")
    dims = _concrete_dims(shape, value.shape)
    if dims is None:
        raise _mismatch(node, value, "shape")
    return defer(value).reshape(dims)


def _converted(dtype: np.dtype, value: np.ndarray) -> np.ndarray:
    return value.astype(dtype)


def _widens_losslessly(have: np.dtype, want: np.dtype) -> bool:
    """Float to a wider float (f16/bf16 -> f32/f64, f32 -> f64): every value is kept."""
    return have.kind in "fV" and want.kind == "f" and have.itemsize < want.itemsize \
        and np.can_cast(have, want, "safe")


def _concrete_dims(shape: Shape, got: tuple[int, ...]) -> tuple[int, ...] | None:
    """The Param's dims with symbols fixed by `got`, or None when `got` does not fit.

    A flat `got` fits a static shape with the same element count.
    """
    if shape.is_static and len(got) == 1 and got[0] == shape.numel:
        return tuple(shape.dims)  # type: ignore[arg-type]
    if len(got) != shape.rank:
        return None
    symbols: dict[str, int] = {}
    for dim, size in zip(shape.dims, got):
        if isinstance(dim, int):
            if dim != size:
                return None
        elif dim != UNKNOWN and symbols.setdefault(dim, size) != size:
            return None
    return got


def _mismatch(node: Node, value: Payload, what: str) -> BindingError:
    assert isinstance(node.op, Param)
    shape: Shape = node.tensor_shape
    count = "" if shape.numel is None else f" ({shape.numel} elements)"
    got = f"{_dtype_text(value.dtype)}[{', '.join(map(str, value.shape))}] ({value.size} elements)"
    return BindingError(
        f"binding for param {node.op.name!r} does not fit ({what}): "
        f"expected {shape}{count}, got {got}"
    )


def _dtype_text(dtype: np.dtype) -> str:
    try:
        return str(DType.from_numpy(dtype.newbyteorder("<")))
    except GraphError:
        return str(dtype)
