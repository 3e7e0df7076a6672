"""Resolve shapes: turn run-time shape arithmetic into constants and static-form ops.

Imported models compute shapes at run time (`Shape -> Gather -> Concat -> Reshape`). Once
the graph's dims are known this is all constant, so in one forward sweep:

- `ShapeOf` / `Size` of a value whose dims are static become Constants;
- *shape arithmetic* - a node whose inputs are all Constants and whose result is an integer
  or bool tensor of at most `MAX_SHAPE_ELEMENTS` elements - is evaluated with its runtime
  kernel (the rest of constant folding is `fold_constants`' job);
- dynamic-form ops whose shape-like operands are now Constants take their static form:
  Reshape, Expand, Tile, Fill, Slice, Pad, Squeeze, Unsqueeze, Reduce, TopK, CumSum,
  Resize (see `rlx.ir.ops.shaping`);
- every node's shape is inferred again from its (possibly sharper) inputs, so the dims
  that were UNKNOWN become static and the next `ShapeOf` down the graph resolves too.

With symbolic dims (`batch`, `width`) the same arithmetic is followed on expressions of
them (`rlx.passes.symbolic_values`): a result that comes out a number still becomes a
Constant, a Reshape or Expand whose target is symbolic takes a static form spelled with
ONNX's placeholders (0 copies an input dim, -1 infers one), and the dims a symbolic target
names (`floor(width/4)`, `batch*8`) replace UNKNOWN ones. A -1 stands for the one size left,
so a size the original model refuses (a target that does not fit the data) may be accepted.

Subgraphs (If, Loop, Scan bodies) are resolved the same way. Run it before
`fold_constants`. Names and node identities are kept as `rlx.ir.rewrite` describes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

import numpy as np

from rlx.errors import ShapeError
from rlx.ir.graph import Graph, Node, ShapeLike
from rlx.ir.ops.base import Op
from rlx.ir.ops.blocks import Pad, Tile
from rlx.ir.ops.generators import Fill, ShapeOf, Size
from rlx.ir.ops.reduce import CumSum, Reduce, TopK
from rlx.ir.ops.resize import Resize
from rlx.ir.ops.shaping import Expand, Gather, Reshape, Squeeze, Unsqueeze
from rlx.ir.ops.slicing import Slice
from rlx.ir.ops.sources import Constant, Input, Param
from rlx.ir.rewrite import Rewriter, constant_value
from rlx.ir.shape import UNKNOWN, Dim, Shape
from rlx.kernels import KERNELS
from rlx.passes.symbolic_values import (
    SymValue,
    constant_of,
    dims_of,
    expand_target,
    reshape_target,
    symbolic_value,
)

__all__ = ["resolve_shapes", "MAX_SHAPE_ELEMENTS"]

log = logging.getLogger(__name__)

MAX_SHAPE_ELEMENTS = 1024
"""Largest integer result evaluated as shape arithmetic."""


def resolve_shapes(graph: Graph) -> tuple[Graph, int]:
    """One forward sweep (see the module doc); returns (graph, nodes resolved)."""
    rw = Rewriter(graph)
    resolved = 0
    known: dict[int, SymValue] = {}  # new id -> its value in terms of the graph's dims
    for node in graph.nodes():
        if _resolve(rw, node, known):
            resolved += 1
    log.info("resolve_shapes %r: %d node(s) resolved", graph.name, resolved)
    return rw.finish(), resolved


def _resolve(rw: Rewriter, node: Node, known: dict[int, SymValue]) -> bool:
    """Map `node` into the new graph; True when it was resolved (not just copied)."""
    op = node.op
    if isinstance(op, (Input, Param, Constant)):
        rw.copy(node)
        return False
    inputs = rw.inputs(node)
    shapes = [rw.target.node(i).shape for i in inputs]
    symbolic = None if isinstance(node.shape, tuple) else symbolic_value(
        op, [rw.target.node(i) for i in inputs], node.shape, known)
    value = _known_value(rw, node, op, inputs, shapes)
    if value is None and symbolic is not None:
        value = constant_of(symbolic, node.tensor_shape)
    if value is not None:
        rw.substitute_constant(node, value)
        log.debug("resolve_shapes: %s is the constant %s", node.label, value.tolist())
        return True
    sliced = _shape_slice(rw, op, inputs, symbolic)
    if sliced is not None:
        rw.substitute(node, sliced[0], sliced[1], node.shape)
        log.debug("resolve_shapes: %s reads its dims off %s", node.label, sliced[0])
        resolved = True
    else:
        resolved = _map(rw, node, inputs, shapes, known)
    if symbolic is not None:
        known[rw.id(node.id)] = symbolic
    return resolved


def _map(rw: Rewriter, node: Node, inputs: tuple[int, ...], shapes: Sequence[ShapeLike],
         known: dict[int, SymValue]) -> bool:
    """Map a node that is no constant: in its static form, or with sharper dims, or as is."""
    op = node.op
    static = _static_form(rw, op, inputs, shapes)
    form = (*static, _sharper(rw, static[0], static[1], node.shape)) if static is not None \
        else _symbolic_form(rw, node, inputs, known)
    if form is not None:
        new_op, kept, shape = form
        rw.substitute(node, new_op, kept, shape)
        log.debug("resolve_shapes: %s takes its static form %s", node.label, new_op)
        return True
    new_op = _with_resolved_subgraphs(op)
    shape = _named(_sharper(rw, new_op, inputs, node.shape), op, inputs, known)
    if new_op is op and shape == node.shape:
        rw.copy(node)
        return False
    rw.substitute(node, new_op, inputs, shape)  # dims (or a subgraph) got sharper
    return True


# -- constants ---------------------------------------------------------------------------------
def _known_value(rw: Rewriter, node: Node, op: Op, inputs: Sequence[int],
                 shapes: Sequence[ShapeLike]) -> np.ndarray | None:
    """The node's value when the shapes it reads or the shape arithmetic it does is known."""
    if isinstance(node.shape, tuple):
        return None
    first = shapes[0] if shapes and isinstance(shapes[0], Shape) else None
    if isinstance(op, ShapeOf) and first is not None and first.is_static:
        return np.array(first.dims[op.start:op.end], dtype=np.int64)
    if isinstance(op, Size) and first is not None and first.is_static:
        return np.array(first.numel, dtype=np.int64)
    if node.shape.dtype.is_float or not inputs:
        return None
    sources = [rw.target.node(i) for i in inputs]
    kernel = KERNELS.get(type(op))
    if kernel is None or any(not isinstance(n.shape, Shape) or n.shape.numel is None
                             or n.shape.numel > MAX_SHAPE_ELEMENTS for n in sources):
        return None  # sizes checked before anything is read (a weight may be large)
    values = [constant_value(n) for n in sources]
    if any(v is None for v in values):
        return None
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(kernel(node, *values))
    except Exception as err:  # a bad constant computation fails at run time, not here
        log.debug("resolve_shapes: %s not evaluated: %s", node.label, err)
        return None
    ok = out.dtype == node.shape.dtype.numpy and out.size <= MAX_SHAPE_ELEMENTS and \
        out.ndim == node.shape.rank
    return out if ok else None


# -- static forms ------------------------------------------------------------------------------
def _ints(value: np.ndarray) -> tuple[int, ...]:
    return tuple(int(v) for v in value.reshape(-1))


def _operands(rw: Rewriter, inputs: Sequence[int], first: int) -> list[np.ndarray] | None:
    """Values of inputs[first:], or None unless all are Constants."""
    values = [v for v in (constant_value(rw.target.node(i)) for i in inputs[first:])
              if v is not None]
    return values if len(values) == len(inputs[first:]) else None


StaticForm = Callable[[Op, list[np.ndarray], Sequence[ShapeLike]], Op | None]


def _shape_operand(field: str) -> StaticForm:
    """Ops whose one dynamic operand (after x) becomes the attribute `field`."""
    return lambda op, values, shapes: dataclasses.replace(op, **{field: _ints(values[0])})


def _slice(op: Slice, values, shapes) -> Op:
    starts, ends, *rest = (_ints(v) for v in values)
    return Slice(starts, ends, *rest)


def _pad(op: Pad, values, shapes) -> Op | None:
    fill = op.value if len(values) == 1 else values[1].reshape(()).item()
    if not np.isfinite(fill):
        return None  # attributes stay JSON-clean: keep a non-finite fill as an input
    return dataclasses.replace(op, pads=_ints(values[0]), value=float(fill))


def _reduce(op: Reduce, values, shapes) -> Op:
    axes = _ints(values[0])
    if not axes:
        return dataclasses.replace(op, axes=() if op.noop_with_empty_axes else None)
    return dataclasses.replace(op, axes=axes)


def _resize(op: Resize, values, shapes) -> Op | None:
    x = shapes[0]
    if not x.is_static:
        return None
    return op.resolved(x.dims, values)


def _scalar_operand(field: str) -> StaticForm:
    return lambda op, values, shapes: dataclasses.replace(
        op, **{field: int(values[0].reshape(()))})


_STATIC_FORMS: dict[type, Callable[..., Op | None]] = {  # each takes its own op type
    Reshape: _shape_operand("shape"),
    Expand: _shape_operand("shape"),
    Tile: _shape_operand("repeats"),
    Squeeze: _shape_operand("axes"),
    Unsqueeze: _shape_operand("axes"),
    Slice: _slice,
    Pad: _pad,
    Reduce: _reduce,
    TopK: _scalar_operand("k"),
    CumSum: _scalar_operand("axis"),
    Resize: _resize,
}
"""Ops whose dynamic form is the data input followed by shape-like operands."""


def _static_form(rw: Rewriter, op: Op, inputs: Sequence[int],
                 shapes: Sequence[ShapeLike]) -> tuple[Op, tuple[int, ...]] | None:
    """(static op, its inputs) when a dynamic-form op's operands are all Constants."""
    if isinstance(op, Fill):
        values = _operands(rw, inputs, 0) if inputs else None
        return None if values is None else (dataclasses.replace(op, shape=_ints(values[0])), ())
    make = _STATIC_FORMS.get(type(op))
    values = _operands(rw, inputs, 1) if make is not None and len(inputs) >= 2 else None
    if make is None or values is None:
        return None
    new_op = make(op, values, shapes)
    if new_op is None:
        return None
    try:
        rw.target.infer(new_op, inputs[:1])
    except ShapeError:
        return None  # operands the op refuses: keep the dynamic form (it fails at run time)
    return new_op, (inputs[0],)


def _shape_slice(rw: Rewriter, op: Op, inputs: Sequence[int], value: SymValue | None
                 ) -> tuple[Op, tuple[int, ...]] | None:
    """`ShapeOf(x, a, b)` for a Gather or Unsqueeze that picks x's dims a..b-1 out of a
    `ShapeOf(x)`: one node for the Shape -> Gather -> Unsqueeze chains exporters write."""
    if not isinstance(op, (Gather, Unsqueeze)) or value is None or value.scalar:
        return None
    source = rw.target.node(inputs[0])
    while isinstance(source.op, (Gather, Unsqueeze)):
        source = rw.target.node(source.inputs[0])
    if not isinstance(source.op, ShapeOf):
        return None
    dims, n = dims_of(rw.target.node(source.inputs[0])), len(value.items)
    for start in range(len(dims) - n + 1):
        if dims[start:start + n] == value.items:
            return ShapeOf(start, start + n), (source.inputs[0],)
    return None


def _symbolic_form(rw: Rewriter, node: Node, inputs: Sequence[int], known: dict[int, SymValue]
                   ) -> tuple[Op, tuple[int, ...], ShapeLike] | None:
    """(static op, its inputs, its shape) for a Reshape or Expand whose target has symbolic
    sizes that ONNX's placeholders spell exactly (`rlx.passes.symbolic_values`)."""
    op = node.op
    target = known.get(inputs[1]) if len(inputs) == 2 else None
    if target is None or target.scalar or getattr(op, "shape", ()) is not None:
        return None
    x = rw.target.node(inputs[0])
    new_op: Op | None = None
    named: list[Dim] = []
    if isinstance(op, Reshape):
        spelled = reshape_target(x, target, op.allowzero)
        if spelled is not None:
            new_op, named = Reshape(spelled[0], op.allowzero), spelled[1]
    elif isinstance(op, Expand):
        shape = expand_target(x, target)
        new_op = None if shape is None else Expand(shape)
    if new_op is None:
        return None
    try:
        inferred = rw.target.infer(new_op, inputs[:1])
    except ShapeError:
        return None  # a target the op refuses: keep the dynamic form (it fails at run time)
    if named and isinstance(inferred, Shape):  # a name where inference found none
        inferred = inferred.with_dims(d if isinstance(d, int) or n == UNKNOWN else n
                                      for d, n in zip(inferred.dims, named))
    return new_op, (inputs[0],), _merge(node.shape, inferred)


def _named(shape: ShapeLike, op: Op, inputs: Sequence[int],
           known: dict[int, SymValue]) -> ShapeLike:
    """`shape` with the UNKNOWN dims that a symbolic size operand names: the shape of a
    dynamic Fill, the target of a dynamic Reshape (its 0 and -1 placeholders excepted)."""
    operand = 0 if isinstance(op, Fill) else 1 if isinstance(op, Reshape) else None
    target = known.get(inputs[operand]) if operand is not None and operand < len(inputs) \
        else None
    if target is None or not isinstance(shape, Shape) or len(target.items) != shape.rank:
        return shape
    names = [item.dim() if item.value is None else UNKNOWN for item in target.items]
    return shape.with_dims(n if d == UNKNOWN else d for d, n in zip(shape.dims, names))


# -- shapes and subgraphs ----------------------------------------------------------------------
def _sharper(rw: Rewriter, op: Op, inputs: Sequence[int], declared: ShapeLike) -> ShapeLike:
    """The node's shape inferred again from its new inputs, keeping any dim that the old
    declaration knew better (inference may not know a dim a leaf or a subgraph declared)."""
    try:
        inferred = rw.target.infer(op, inputs)
    except ShapeError:
        return declared
    return _merge(declared, inferred)


def _merge(declared: ShapeLike, inferred: ShapeLike) -> ShapeLike:
    if isinstance(declared, tuple) or isinstance(inferred, tuple):
        if not (isinstance(declared, tuple) and isinstance(inferred, tuple)):
            return declared
        return tuple(_merge_one(d, i) for d, i in zip(declared, inferred))
    return _merge_one(declared, inferred)


def _merge_one(declared: Shape, inferred: Shape) -> Shape:
    if declared.rank != inferred.rank or declared.dtype != inferred.dtype:
        return declared
    # inference wins, except where it knows less: a size, or a name, over UNKNOWN
    return Shape([d if i == UNKNOWN or isinstance(d, int) and not isinstance(i, int) else i
                  for d, i in zip(declared.dims, inferred.dims)], declared.dtype)


def _with_resolved_subgraphs(op: Op) -> Op:
    """`op` with its subgraphs resolved (the same op when none changed)."""
    return op.with_subgraphs([resolve_shapes(sub)[0] for sub in op.subgraphs()])
