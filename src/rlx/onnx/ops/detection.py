"""Detection ops: NonMaxSuppression as a greedy scan over boxes in score order.

Each (batch, class) sorts its boxes by score (TopK is stable: equal scores keep index
order, as ONNX wants). A pairwise "suppresses" matrix is computed once, reordered to score
order, and an IR Scan walks the boxes: a box is kept when it passes the score threshold,
no kept box suppresses it, and fewer than max_output_boxes_per_class are kept. NonZero of
the final keep mask lists (batch, class, rank), already in ONNX's output order.
"""

from __future__ import annotations

import numpy as np

from rlx.ir import (
    BinaryOp,
    CompareOp,
    Concat,
    DType,
    GatherElements,
    GatherND,
    LogicalOp,
    NonZero,
    ReduceOp,
    Scan,
    Shape,
    TopK,
)
from rlx.onnx.emit import Builder, Emitter
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter

__all__ = ["non_max_suppression"]


def _extent(s: Emitter, boxes: int, center: bool):
    """(xmin, xmax, ymin, ymax), each [B, N], of boxes in either ONNX layout."""
    c = [s.take(boxes, i, axis=2) for i in range(4)]
    if center:  # [x_center, y_center, width, height]
        half_w, half_h = (s.div(v, s.like(2, v)) for v in (c[2], c[3]))
        return s.sub(c[0], half_w), s.add(c[0], half_w), s.sub(c[1], half_h), \
            s.add(c[1], half_h)
    lo, hi = BinaryOp.MIN, BinaryOp.MAX  # [y1, x1, y2, x2], corners in any order
    return (s.binary(lo, c[1], c[3]), s.binary(hi, c[1], c[3]),
            s.binary(lo, c[0], c[2]), s.binary(hi, c[0], c[2]))


def _suppresses(s: Emitter, boxes: int, center: bool, threshold: int) -> int:
    """[B, N, N] bool: box i and box j overlap with IoU above the threshold (and both have
    a positive area), the test of ONNX's reference."""
    xmin, xmax, ymin, ymax = _extent(s, boxes, center)

    def pair(v: int) -> tuple[int, int]:
        return s.unsqueeze(v, (2,)), s.unsqueeze(v, (1,))

    (x0a, x0b), (x1a, x1b) = pair(xmin), pair(xmax)
    (y0a, y0b), (y1a, y1b) = pair(ymin), pair(ymax)
    width = s.sub(s.binary(BinaryOp.MIN, x1a, x1b), s.binary(BinaryOp.MAX, x0a, x0b))
    height = s.sub(s.binary(BinaryOp.MIN, y1a, y1b), s.binary(BinaryOp.MAX, y0a, y0b))
    inter = s.mul(width, height)
    area = s.mul(s.sub(xmax, xmin), s.sub(ymax, ymin))
    area_a, area_b = pair(area)
    union = s.sub(s.add(area_a, area_b), inter)
    positive = [s.compare(CompareOp.GT, v, s.like(0, v))
                for v in (width, height, inter, area_a, area_b, union)]
    ok = positive[0]
    for p in positive[1:]:
        ok = s.logical(LogicalOp.AND, ok, p)
    safe = s.where(ok, union, s.like(1, union))
    above = s.compare(CompareOp.GT, s.div(inter, safe), s.reshape(threshold, ()))
    return s.logical(LogicalOp.AND, ok, above)


def _greedy_body(b: Shape, n: int) -> Builder:
    """Scan body: state (keep [B, C, N], count [B, C], limit), slices (suppressed-by
    column [B, C, N], candidate [B, C], one-hot of this rank [N])."""
    g = Builder("nms_step")
    batch, classes = b.dims[:2]
    keep = g.graph.input("keep", Shape((batch, classes, n), DType.BOOL))
    count = g.graph.input("count", Shape((batch, classes), DType.I64))
    limit = g.graph.input("limit", Shape((), DType.I64))
    column = g.graph.input("column", Shape((batch, classes, n), DType.BOOL))
    candidate = g.graph.input("candidate", Shape((batch, classes), DType.BOOL))
    hot = g.graph.input("hot", Shape((n,), DType.BOOL))
    hit = g.reduce(ReduceOp.MAX, g.logical(LogicalOp.AND, keep, column), (-1,), False)
    take = g.logical(LogicalOp.AND, candidate, g.not_(hit))
    take = g.logical(LogicalOp.AND, take, g.compare(CompareOp.LT, count, limit))
    keep = g.logical(LogicalOp.OR, keep, g.logical(LogicalOp.AND, g.unsqueeze(take, (-1,)),
                                                    hot))
    count = g.add(count, g.cast(take, DType.I64))
    g.graph.set_outputs([keep, count, limit])
    return g


@converter("NonMaxSuppression")
def non_max_suppression(n: NodeContext) -> int:
    s = n.s
    boxes, scores = n.input(0), n.input(1)
    shape = s.shape(scores)
    count = shape.dims[2]
    if not isinstance(count, int):
        raise n.fail(f"needs a static number of boxes, got scores {shape}")
    limit = s.reshape(s.cast(n.input(2), DType.I64), ()) if n.has(2) else \
        s.scalar(0, DType.I64)
    limit = s.binary(BinaryOp.MAX, limit, s.scalar(0, DType.I64))
    iou = n.input(3) if n.has(3) else s.like(0, boxes)
    ranked, order = s.parts(s.emit(TopK(count, -1, True, True), scores))
    if n.has(4):
        candidate = s.compare(CompareOp.GT, ranked, s.reshape(n.input(4), ()))
    else:
        candidate = s.full_like(ranked, 1, DType.BOOL)
    # suppression matrix per (batch, class), rows and columns in score order
    pairs = _suppresses(s, boxes, bool(n.attr("center_point_box", 0)), iou)
    full = s.emit(Concat(0), s.shape_of(scores), s.const(np.array([count], np.int64)))
    pairs = s.expand(s.unsqueeze(pairs, (1,)), full)
    rows = s.expand(s.unsqueeze(order, (-1,)), full)
    cols = s.expand(s.unsqueeze(order, (-2,)), full)
    pairs = s.emit(GatherElements(3), s.emit(GatherElements(2), pairs, rows), cols)
    body = _greedy_body(shape, count)
    keep0 = s.full_like(ranked, 0, DType.BOOL)
    count0 = s.fill(s.shape_of(scores, 0, 2), 0, DType.I64)
    hot = s.const(np.eye(count, dtype=bool))
    final = s.emit(Scan(body.graph, 3, (3, 2, 0)), keep0, count0, limit, pairs, candidate, hot)
    keep = s.parts(final, 1)[0]
    picked = s.transpose(s.emit(NonZero(), keep), (1, 0))  # [K, 3]: batch, class, rank
    box = s.emit(GatherND(), order, picked)
    return s.emit(Concat(1), s.slice(picked, (0,), (2,), (1,)), s.unsqueeze(box, (-1,)))
