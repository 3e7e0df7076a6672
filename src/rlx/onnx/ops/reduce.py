"""Reductions, ArgMax/ArgMin, CumSum and TopK.

ReduceSum takes its axes as an input from opset 13, the other Reduce ops from opset 18;
before, they are an attribute. Empty or absent axes reduce everything, unless
`noop_with_empty_axes` asks for the input unreduced.
"""

from __future__ import annotations

from rlx.ir import ArgMax, ArgMin, Concat, CumSum, DType, Reduce, ReduceOp, Scan, TopK
from rlx.onnx.emit import Builder, Emitter
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter
from rlx.onnx.switch import normalized_axis, per_axis

__all__ = ["reduce", "arg_max", "arg_min", "cumsum", "cumprod", "top_k"]

_REDUCE = {
    "ReduceSum": (ReduceOp.SUM, 13), "ReduceMean": (ReduceOp.MEAN, 18),
    "ReduceMax": (ReduceOp.MAX, 18), "ReduceMin": (ReduceOp.MIN, 18),
    "ReduceProd": (ReduceOp.PROD, 18), "ReduceL1": (ReduceOp.L1, 18),
    "ReduceL2": (ReduceOp.L2, 18), "ReduceLogSum": (ReduceOp.LOG_SUM, 18),
    "ReduceLogSumExp": (ReduceOp.LOG_SUM_EXP, 18),
    "ReduceSumSquare": (ReduceOp.SUM_SQUARE, 18),
}


@converter(*_REDUCE)
def reduce(n: NodeContext) -> int:
    op, axes_as_input = _REDUCE[n.op_type]
    x = n.input(0)
    keepdims = bool(n.attr("keepdims", 1))
    noop = bool(n.attr("noop_with_empty_axes", 0))
    if n.opset < axes_as_input:
        axes = n.attr("axes")
    elif n.has(1) and n.static(1) is None:
        axes_node = n.s.cast(n.input(1), DType.I64)
        return n.s.emit(Reduce(op, None, keepdims, noop), x, axes_node)
    else:
        axes = n.static_ints(1) if n.has(1) else None
    if not axes:
        axes = () if noop else None
    return n.s.reduce(op, x, axes, keepdims)


def _arg(n: NodeContext, cls) -> int:
    return n.s.emit(cls(n.attr("axis", 0), bool(n.attr("keepdims", 1)),
                        bool(n.attr("select_last_index", 0))), n.input(0))


@converter("ArgMax")
def arg_max(n: NodeContext) -> int:
    return _arg(n, ArgMax)


@converter("ArgMin")
def arg_min(n: NodeContext) -> int:
    return _arg(n, ArgMin)


@converter("CumSum")
def cumsum(n: NodeContext) -> int:
    x = n.input(0)
    flags = bool(n.attr("exclusive", 0)), bool(n.attr("reverse", 0))
    if n.static(1) is not None:
        return n.s.emit(CumSum(int(n.static_scalar(1)), *flags), x)
    return n.s.emit(CumSum(None, *flags), x, n.s.reshape(n.input(1), ()))


@converter("CumProd")
def cumprod(n: NodeContext) -> int:
    """A Scan along the axis carrying the running product (an axis known only at run time
    picks one such Scan per possible axis)."""
    s = n.s
    x = n.input(0)
    exclusive, reverse = bool(n.attr("exclusive", 0)), bool(n.attr("reverse", 0))

    def along(axis: int, e: Emitter, x: int) -> int:
        shape = e.shape(x)
        axis %= shape.rank
        body = Builder("cumprod_step")
        piece = shape.with_dims(d for i, d in enumerate(shape.dims) if i != axis)
        total = body.graph.input("total", piece)
        step = body.graph.input("x", piece)
        product = body.mul(total, step)
        body.graph.set_outputs([product, total if exclusive else product])
        rest = e.emit(Concat(0), e.shape_of(x, 0, axis), e.shape_of(x, axis + 1))
        ones = e.fill(rest, 1, shape.dtype)
        order = (int(reverse),)
        scan = e.emit(Scan(body.graph, 1, (axis,), order, (axis,), order), ones, x)
        return e.parts(scan)[1]

    if n.static(1) is not None:
        return along(int(n.static_scalar(1)), s, x)
    rank = s.rank(x)
    return per_axis(s, x, normalized_axis(s, n.input(1), rank), rank, along)


@converter("TopK")
def top_k(n: NodeContext):
    x = n.input(0)
    largest, ordered = bool(n.attr("largest", 1)), bool(n.attr("sorted", 1))
    axis = n.attr("axis", -1)
    if n.opset < 10:
        k: int | None = n.attr("k")
    else:
        k = int(n.static_scalar(1)) if n.static(1) is not None else None
    if k is not None:
        node = n.s.emit(TopK(k, axis, largest, ordered), x)
    else:
        k_node = n.s.reshape(n.s.cast(n.input(1), DType.I64), ())
        node = n.s.emit(TopK(None, axis, largest, ordered), x, k_node)
    return n.s.parts(node)
