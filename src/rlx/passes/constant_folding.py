"""Constant folding: evaluate nodes whose inputs are all constants, at bake time.

Each such node is run through its runtime kernel (`KERNELS[type(op)](node, *arrays)`) and
replaced by a Constant of the result under the node's name. Folding proceeds in graph order
on the graph being built, so whole constant subgraphs collapse in one pass. Not folded:

- nodes with no inputs (leaves, generators) and nodes reading an Input or Param;
- ops that only have compile-time builders (control flow, subgraphs);
- `DequantMatMul`, `DecodeWeight`, `DequantGather`: folding them would decode a packed
  weight back to dense floats;
- a `DequantizeLinear` whose result is larger than its inputs: an int8 weight stays int8
  in the file (the kernel keeps its dequantised copy in memory);
- results that GROW: larger than the node's inputs combined and over `MAX_GROWN_ELEMENTS`
  elements (an `Expand` or fill of a scalar would otherwise bloat the artifact);
- nodes whose kernel fails (logged; the error will surface at run time instead).

A result of `DEFER_MIN_BYTES` or more (a Transpose of a weight) is not computed here but
deferred (`rlx.deferred.Computed`): the kernel runs whenever the constant is read, so a
bake never holds every folded weight at once; its kernel failing then is a `BakeError`.

A tuple-valued node (Split, TopK, ...) is evaluated once and its `TupleGet` readers become
constants; the node itself is kept for DCE to remove.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from rlx.deferred import DEFER_MIN_BYTES, Computed, Payload, byte_view
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.base import Op
from rlx.ir.ops.dequant import DequantMatMul
from rlx.ir.ops.multi import TupleGet
from rlx.ir.ops.packed import DecodeWeight, DequantGather
from rlx.ir.ops.quant import DequantizeLinear
from rlx.ir.ops.sources import Constant
from rlx.ir.rewrite import Rewriter, constant_value
from rlx.ir.shape import Shape
from rlx.kernels import KERNELS

__all__ = ["fold_constants", "MAX_GROWN_ELEMENTS", "NEVER_FOLD", "NEVER_WIDENED"]

log = logging.getLogger(__name__)

MAX_GROWN_ELEMENTS = 256 * 1024
"""A folded result larger than its inputs may have at most this many elements."""

NEVER_FOLD: tuple[type[Op], ...] = (DequantMatMul, DecodeWeight, DequantGather)
"""Ops kept even over constant inputs."""

NEVER_WIDENED: tuple[type[Op], ...] = (DequantizeLinear,)
"""Ops kept over constant inputs smaller than their result (quantised weights)."""


def fold_constants(graph: Graph) -> tuple[Graph, int]:
    """Replace constant-only computations by their values; returns (graph, nodes folded)."""
    rw = Rewriter(graph)
    tuples: dict[int, tuple[tuple[np.ndarray, ...], int]] = {}  # id -> (parts, input bytes)
    folded = 0
    for node in graph.nodes():
        evaluated = _evaluate(rw, node, tuples)
        if evaluated is None:
            rw.copy(node)
            continue
        value, input_bytes = evaluated
        if isinstance(value, tuple):
            tuples[node.id] = (value, input_bytes)
            rw.copy(node)
        elif _fits(node, value, input_bytes):
            rw.substitute_constant(node, value)
            folded += 1
            log.debug("fold: %s -> constant %s[%s]", node.label, node.tensor_shape.dtype,
                      ", ".join(map(str, value.shape)))
        else:
            rw.copy(node)
    log.info("fold %r: %d node(s) folded into constants", graph.name, folded)
    return rw.finish(), folded


def _evaluate(rw: Rewriter, node: Node, tuples: dict) -> tuple[Any, int] | None:
    """(value, bytes of the constants it was computed from), or None if it is not foldable.

    A large result is not computed here: it is a `Computed` of the kernel over the input
    payloads (`rlx.deferred`), run whenever the folded constant is read."""
    if isinstance(node.op, TupleGet) and node.inputs[0] in tuples:
        parts, input_bytes = tuples[node.inputs[0]]
        return parts[node.op.index], input_bytes
    kernel = KERNELS.get(type(node.op))
    if kernel is None or not node.inputs or isinstance(node.op, NEVER_FOLD):
        return None
    sources = [rw.node(i) for i in node.inputs]
    payloads = [p for p in map(_payload, sources) if p is not None]
    if len(payloads) != len(sources):
        return None
    input_bytes = sum(p.nbytes for p in payloads)
    if isinstance(node.op, NEVER_WIDENED) and (node.tensor_shape.nbytes or 0) > input_bytes:
        return None
    if _grows(node, input_bytes):
        return None  # refused by its declared size, before the kernel allocates it
    if _deferred(node):
        shape = node.tensor_shape
        # the kernel sees a node of no id, name or origin: folds of equal inputs by equal
        # ops are then one Computed, which dedupe_identical_constants merges
        anonymous = Node(0, node.op, tuple(range(len(sources))), node.shape)
        return Computed(_kernel_value, tuple(payloads),
                        (anonymous, tuple(n.shape for n in sources)),
                        tuple(int(d) for d in shape.dims), shape.dtype.numpy,
                        label=f"fold: {node.label}"), input_bytes
    arrays = [constant_value(n) for n in sources]
    try:
        with np.errstate(all="ignore"):  # the runtime would compute the same inf/NaN
            value = kernel(node, *arrays)
    except Exception as err:  # a bad constant subgraph fails at run time, not at bake time
        log.warning("fold: %s not folded, its kernel failed: %s", node.label, err)
        return None
    value = tuple(value) if isinstance(value, (tuple, list)) else np.asarray(value)
    return value, input_bytes


def _payload(node: Node) -> Payload | None:
    """What `constant_value` would read, unread (None where it gives None)."""
    op, shape = node.op, node.shape
    if not isinstance(op, Constant) or not isinstance(shape, Shape) or not shape.is_static \
            or (op.is_stripped and shape.nbytes != 0):
        return None
    return op.data


def _deferred(node: Node) -> bool:
    """Whether the node's result is large enough to be computed when read, not now."""
    shape = node.shape
    return isinstance(shape, Shape) and shape.nbytes is not None \
        and shape.nbytes >= DEFER_MIN_BYTES


def _kernel_value(node: Node, shapes: tuple[Shape, ...], *payloads: np.ndarray) -> np.ndarray:
    """A deferred fold's value: the node's kernel over its inputs' bytes."""
    arrays = [byte_view(p).view(s.dtype.numpy).reshape(s.dims) for p, s in zip(payloads, shapes)]
    with np.errstate(all="ignore"):
        return np.asarray(KERNELS[type(node.op)](node, *arrays))


def _grows(node: Node, input_bytes: int) -> bool:
    """Whether the node's declared result would be a blown-up fill (see `_fits`): a Tile
    of 108 bytes declaring 1 GiB is not computed to find that out."""
    if isinstance(node.shape, tuple):  # tuple-valued nodes declare no one shape
        return False
    numel, nbytes = node.shape.numel, node.shape.nbytes
    if numel is None or nbytes is None or nbytes <= input_bytes or numel <= MAX_GROWN_ELEMENTS:
        return False
    log.info("fold: %s not folded: %d elements (%d bytes) from %d input bytes would "
             "grow the graph", node.label, numel, nbytes, input_bytes)
    return True


def _fits(node: Node, value: np.ndarray, input_bytes: int) -> bool:
    """Whether `value` may replace `node`: the declared type, and not a blown-up fill."""
    shape = node.tensor_shape
    if value.dtype != shape.dtype.numpy or value.ndim != shape.rank or any(
        isinstance(d, int) and d != s for d, s in zip(shape.dims, value.shape)
    ):
        log.warning("fold: %s not folded: kernel gave %s %s, declared %s", node.label,
                    value.dtype, list(value.shape), shape)
        return False
    if value.nbytes > input_bytes and value.size > MAX_GROWN_ELEMENTS:
        log.info("fold: %s not folded: %d elements (%d bytes) from %d input bytes would "
                 "grow the graph", node.label, value.size, value.nbytes, input_bytes)
        return False
    return True
