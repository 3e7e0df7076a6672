"""Resize (opsets 10 to 19+) and Upsample, as one IR Resize.

Everything ONNX lets vary by opset is settled here: where scales/sizes/roi come from
(attributes, inputs, empty tensors meaning absent), `axes` (operands for some axes only),
and `keep_aspect_ratio_policy`. Known operands give the static form with the exact sizes of
ONNX's reference; operands known only at run time give the dynamic form, with the partial
and aspect-ratio cases spelled out as IR arithmetic in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlx.ir import (
    Activation,
    CoordinateMode,
    DType,
    NearestMode,
    Reduce,
    ReduceOp,
    Resize,
    ResizeMode,
    ScatterElements,
)
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter

__all__ = ["upsample", "resize"]

_OLD = dict(coordinate_mode=CoordinateMode.ASYMMETRIC, nearest_mode=NearestMode.FLOOR)
"""Upsample and Resize-10: output index i samples input i / scale, nearest rounds down."""


@converter("Upsample")
def upsample(n: NodeContext) -> int:
    mode = n.enum_attr(ResizeMode, "mode", "nearest")
    scales = n.attr("scales") if n.opset < 9 else n.static(1)
    common = dict(mode=mode, **_OLD)
    x = n.input(0)
    if scales is None or not n.s.shape(x).is_static:
        scales = n.s.const(np.asarray(scales, np.float32)) if scales is not None else \
            n.input(1)
        return _dynamic(n, x, None, scales, None, common)
    return _static(n, x, None, [float(v) for v in np.reshape(scales, -1)], None, common)


@converter("Resize")
def resize(n: NodeContext) -> int:
    x = n.input(0)
    mode = n.enum_attr(ResizeMode, "mode", "nearest")
    if n.opset < 11:
        operands = [None, n.input(1), None]
        common: dict[str, Any] = dict(mode=mode, **_OLD)
    else:
        operands = [n.input(i) if _given(n, i) else None for i in (1, 2, 3)]
        common = dict(
            mode=mode,
            coordinate_mode=n.enum_attr(CoordinateMode, "coordinate_transformation_mode",
                                        "half_pixel"),
            nearest_mode=n.enum_attr(NearestMode, "nearest_mode", "round_prefer_floor"),
            cubic_coeff_a=float(n.attr("cubic_coeff_a", -0.75)),
            exclude_outside=bool(n.attr("exclude_outside", 0)),
            extrapolation_value=float(n.attr("extrapolation_value", 0.0)),
            antialias=bool(n.attr("antialias", 0)) and mode is not ResizeMode.NEAREST)
    roi, scales, sizes = operands
    if common.get("coordinate_mode") is not CoordinateMode.TF_CROP_AND_RESIZE:
        roi = None
    operands = [roi, scales, sizes]
    known = [None if v is None else n.s.value(v) for v in operands]
    if n.s.shape(x).is_static and all(v is None or k is not None
                                      for v, k in zip(operands, known)):
        roi, scales, sizes = (None if k is None else k.reshape(-1).tolist() for k in known)
        return _static(n, x, roi, scales, sizes, common)
    return _dynamic(n, x, roi, scales, sizes, common)


def _given(n: NodeContext, i: int) -> bool:
    """An input that is present and not an empty tensor (ONNX's other way to omit one)."""
    if not n.has(i):
        return False
    dims = n.s.shape(n.input(i)).dims
    return not (len(dims) == 1 and dims[0] == 0)


# -- static form: ONNX's reference arithmetic on known values ----------------------------------
def _static(n: NodeContext, x: int, roi, scales, sizes, common: dict) -> int:
    shape = n.s.shape(x)  # static: the callers check
    dims = shape.dims
    rank = shape.rank
    axes = _axes(n, rank)
    if scales is not None:
        scales = _spread(scales, axes, [1.0] * rank)
    if sizes is not None:
        sizes = _spread(sizes, axes, list(dims))
    if roi is not None:
        roi = _spread(roi[:len(axes)], axes, [0.0] * rank) + \
            _spread(roi[len(axes):], axes, [1.0] * rank)
    if sizes is not None:
        ratios = [s / d if d else 1.0 for s, d in zip(sizes, dims)]
        policy = n.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = {"not_larger": min, "not_smaller": max}.get(policy)
            if pick is None:
                raise n.fail(f"unknown keep_aspect_ratio_policy {policy!r}")
            scale = pick(ratios[a] for a in axes)
            sizes = tuple(int(scale * int(d) + 0.5) if a in axes else d
                          for a, d in enumerate(dims))
            scales = tuple(scale if a in axes else 1.0 for a in range(rank))
    else:
        if scales is None:
            raise n.fail("needs scales or sizes")
        # float32 scales times the dims in float64, truncated: ONNX's reference
        sizes = tuple(int(np.float32(s) * np.float64(d)) for s, d in zip(scales, dims))
    return n.s.emit(Resize(tuple(sizes), None if scales is None else tuple(scales),
                           None if roi is None else tuple(roi), **common), x)


def _axes(n: NodeContext, rank: int) -> list[int]:
    axes = n.attr("axes")
    return list(range(rank)) if axes is None else [a % rank for a in axes]


def _spread(values, axes: list[int], full: list) -> tuple:
    """Per-axis values for the listed axes, placed into the defaults for all axes."""
    out = list(full)
    for a, v in zip(axes, values):
        out[a] = v
    return tuple(out)


# -- dynamic form ------------------------------------------------------------------------------
def _dynamic(n: NodeContext, x: int, roi, scales, sizes, common: dict) -> int:
    s = n.s
    rank = s.rank(x)
    axes = _axes(n, rank)
    partial = axes != list(range(rank))
    operands: dict[str, int] = {}
    if sizes is not None:
        sizes = s.cast(sizes, DType.I64)
        if partial:
            sizes = _scatter(n, s.shape_of(x), axes, sizes)
        policy = n.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            sizes, operands["scales"] = _keep_aspect(n, x, sizes, axes, policy)
        operands = {"sizes": sizes, **operands}
    elif scales is not None:
        if s.dtype(scales) not in (DType.F32, DType.F64):
            scales = s.cast(scales, DType.F32)
        if partial:
            scales = _scatter(n, s.const(np.ones(rank, s.dtype(scales).numpy)), axes, scales)
        operands["scales"] = scales
    if roi is not None:
        roi = s.cast(roi, DType.F32) if s.dtype(roi) not in (DType.F32, DType.F64) else roi
        if partial:
            defaults = s.const(np.array([0.0] * rank + [1.0] * rank, s.dtype(roi).numpy))
            roi = _scatter(n, defaults, axes + [a + rank for a in axes], roi)
        operands["roi"] = roi
    if not operands:
        raise n.fail("needs scales or sizes")
    names = tuple(operands)
    return s.emit(Resize(None, **common, operands=names), x, *operands.values())


def _scatter(n: NodeContext, full: int, axes: list[int], values: int) -> int:
    """`full` with positions `axes` replaced by `values`."""
    index = n.s.const(np.array(axes, np.int64))
    return n.s.emit(ScatterElements(0), full, index, n.s.cast(values, n.s.dtype(full)))


def _keep_aspect(n: NodeContext, x: int, sizes: int, axes: list[int], policy: str):
    """Sizes and scales under not_larger / not_smaller: one scale for the listed axes
    (the smallest / largest size ratio), sizes rounded half up (ONNX's reference)."""
    s = n.s
    if policy not in ("not_larger", "not_smaller"):
        raise n.fail(f"unknown keep_aspect_ratio_policy {policy!r}")
    dims = s.cast(s.shape_of(x), DType.F64)
    ratios = s.div(s.cast(sizes, DType.F64), dims)
    index = s.const(np.array(axes, np.int64))
    picked = s.emit(Reduce(ReduceOp.MIN if policy == "not_larger" else ReduceOp.MAX, None,
                           True), s.gather(ratios, index))
    ones = s.const(np.ones(s.rank(x), np.float64))
    scales = _scatter(n, ones, axes, s.expand(picked, (len(axes),)))
    rounded = s.unary(Activation.FLOOR, s.add(s.mul(scales, dims), s.scalar(0.5, DType.F64)))
    return s.cast(rounded, DType.I64), scales
