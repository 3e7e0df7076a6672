"""Resize with ONNX semantics (nearest, linear and cubic; every coordinate mode).

A family of its own, apart from `rlx.ir.ops.nn`: an image model's upsampling, which a
transformer never has, and a graph without it imports neither this class nor its kernel
(issue 35).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op
from rlx.ir.shape import UNKNOWN, Shape
from rlx.record import dataclass, replace  # dataclasses', cheaper to create

__all__ = ["ResizeMode", "CoordinateMode", "NearestMode", "Resize"]


class ResizeMode(enum.Enum):
    NEAREST = "nearest"
    LINEAR = "linear"
    CUBIC = "cubic"


class CoordinateMode(enum.Enum):
    """ONNX `coordinate_transformation_mode`: where output index i samples the input."""

    HALF_PIXEL = "half_pixel"
    HALF_PIXEL_SYMMETRIC = "half_pixel_symmetric"
    PYTORCH_HALF_PIXEL = "pytorch_half_pixel"
    ALIGN_CORNERS = "align_corners"
    ASYMMETRIC = "asymmetric"
    TF_CROP_AND_RESIZE = "tf_crop_and_resize"


class NearestMode(enum.Enum):
    ROUND_PREFER_FLOOR = "round_prefer_floor"
    ROUND_PREFER_CEIL = "round_prefer_ceil"
    FLOOR = "floor"
    CEIL = "ceil"


@dataclass(frozen=True)
class Resize(Op):
    """ONNX Resize (opset 19, without keep_aspect_ratio_policy) to a static shape.

    `sizes` is the full output shape. `scales`, when ONNX gave scales, are the per-axis
    factors the coordinate transform uses (else scale = out / in). `roi`, the ONNX roi
    tensor `(start_0, ..., end_0, ...)` over all axes, is required by `tf_crop_and_resize`
    (where samples outside the input get `extrapolation_value`) and refused otherwise.
    Linear and cubic are separable: one axis at a time, like ONNX's reference. With
    `antialias`, a downsampling linear/cubic filter is widened by 1 / scale (ONNX's rule).

    Dynamic form: `operands` names which of "sizes", "scales", "roi" (in that order) follow
    x as run-time inputs (full rank, like the attributes); those attributes are None. Sizes
    neither given nor an operand are floor(in * scale), as ONNX's reference computes them.
    """

    sizes: tuple[int, ...] | None
    scales: tuple[float, ...] | None = None
    roi: tuple[float, ...] | None = None
    mode: ResizeMode = ResizeMode.NEAREST
    coordinate_mode: CoordinateMode = CoordinateMode.HALF_PIXEL
    nearest_mode: NearestMode = NearestMode.ROUND_PREFER_FLOOR
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False
    extrapolation_value: float = 0.0
    antialias: bool = False
    operands: tuple[str, ...] = ()
    arity: ClassVar = (1, 4)

    def infer(self, inputs):
        x = inputs[0]
        if x.dtype is DType.BOOL and self.mode is not ResizeMode.NEAREST:
            raise ShapeError(f"Resize {self.mode.value}: needs a numeric input, got {x.dtype}")
        if self.operands or len(inputs) > 1:
            return self._infer_dynamic(inputs)
        if self.sizes is None:
            raise ShapeError("Resize: sizes is None, so it must be named in operands")
        if len(self.sizes) != x.rank or any(s < 0 for s in self.sizes):
            raise ShapeError(f"Resize: sizes {self.sizes} is not a shape of rank {x.rank}")
        if self.scales is not None and (
                len(self.scales) != x.rank or any(not s > 0 for s in self.scales)):
            raise ShapeError(f"Resize: scales {self.scales} must be {x.rank} positive numbers")
        cropping = self.coordinate_mode is CoordinateMode.TF_CROP_AND_RESIZE
        if cropping != (self.roi is not None):
            raise ShapeError("Resize: roi is required by tf_crop_and_resize and only by it")
        if self.roi is not None and len(self.roi) != 2 * x.rank:
            raise ShapeError(f"Resize: roi needs {2 * x.rank} entries, got {len(self.roi)}")
        for n, s in zip(x.dims, self.sizes):
            if n == 0 and s > 0:
                raise ShapeError(f"Resize: cannot resize an empty axis to {s}, input {x}")
        return x.with_dims(self.sizes)

    def _infer_dynamic(self, inputs: Sequence[Shape]) -> Shape:
        x = inputs[0]
        names = ("sizes", "scales", "roi")
        if list(self.operands) != [n for n in names if n in self.operands] or \
                len(inputs) != 1 + len(self.operands):
            raise ShapeError(f"Resize: operands {self.operands} must name the inputs after x "
                             f"in the order {names}, one per input")
        if any(getattr(self, n) is not None for n in self.operands):
            raise ShapeError("Resize: an operand given as an input must be None as attribute")
        if self.sizes is None and "sizes" not in self.operands and \
                self.scales is None and "scales" not in self.operands:
            raise ShapeError("Resize: needs sizes or scales")
        for name, shape in zip(self.operands, inputs[1:]):
            want = 2 * x.rank if name == "roi" else x.rank
            kinds = (DType.I64,) if name == "sizes" else (DType.F32, DType.F64, DType.F16)
            if shape.rank != 1 or shape.dtype not in kinds or shape.dims[0] not in (want,
                                                                                   UNKNOWN):
                raise ShapeError(f"Resize: {name} must be a 1-D tensor of {want} values, "
                                 f"got {shape}")
        return x.with_dims(self.sizes or [UNKNOWN] * x.rank)

    def resolved(self, dims: Sequence[int], values: Sequence) -> Resize:
        """The static form for an input of `dims`, given the operands' run-time values."""
        given = dict(zip(self.operands, values))
        scales = given.get("scales")
        scales = self.scales if scales is None else tuple(float(v) for v in scales)
        roi = given.get("roi")
        roi = self.roi if roi is None else tuple(float(v) for v in roi)
        sizes = given.get("sizes")
        if sizes is not None:
            sizes = tuple(int(v) for v in sizes)
        elif self.sizes is not None:
            sizes = self.sizes
        else:
            assert scales is not None, "a Resize has sizes or scales"  # infer checked it
            sizes = tuple(int(math.floor(s * n)) for s, n in zip(scales, dims))
        return replace(self, sizes=sizes, scales=scales, roi=roi, operands=())

    def axis_scale(self, axis: int, size: int) -> float:
        """The scale the coordinate transform uses on `axis` for an input of `size`."""
        if self.scales is not None:
            return self.scales[axis]
        assert self.sizes is not None, "a Resize has sizes or scales"
        return self.sizes[axis] / size if size else 1.0

    def is_identity_axis(self, axis: int, size: int) -> bool:
        """Whether `axis` is left as is: same size, scale 1 and no crop (ONNX's shortcut)."""
        assert self.sizes is not None, "only a resolved Resize (sizes known) is asked"
        roi = (0.0, 1.0) if self.roi is None else self.roi[axis::len(self.sizes)]
        return (self.sizes[axis] == size and math.isclose(self.axis_scale(axis, size), 1.0)
                and math.isclose(roi[0], 0.0) and math.isclose(roi[1], 1.0))
