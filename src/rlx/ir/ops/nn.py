"""Neural-network ops: convolution, pooling, normalisation, softmax, resize.

Semantics are ONNX's. The ONNX importer resolves opset quirks (auto_pad, optional inputs
given as constants) into explicit attributes, so every op here is fully spelled out. Sliding
window ops take per-spatial-axis tuples; `pads` is `(begin_0, ..., begin_n-1, end_0, ...,
end_n-1)`, and an empty `strides` / `dilations` / `pads` / `output_padding` means the ONNX
default (all 1 / all 0). `Window` resolves them once, for `infer` and the kernels alike.
Conv and Pool may instead take `same` (ONNX auto_pad SAME_UPPER / SAME_LOWER) where the pads
depend on a size known only at run time: `Window` then works them out from the input's
actual spatial sizes.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Sequence
from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, OpMixin, expect_dtype, op_axis
from rlx.ir.shape import UNKNOWN, Dim, Shape, broadcast_dims
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = [
    "SamePad", "Conv", "ConvTranspose", "PoolKind", "Pool", "GlobalPool", "Softmax", "LogSoftmax",
    "LayerNorm", "BatchNormInference", "InstanceNorm", "PRelu", "ResizeMode",
    "CoordinateMode", "NearestMode", "Resize",
]


# -- sliding-window geometry ----------------------------------------------------------------
@dataclass(frozen=True)
class Window:
    """Per-spatial-axis geometry of a sliding window, ONNX defaults filled in and checked."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]
    end: tuple[int, ...]

    @property
    def extent(self) -> tuple[int, ...]:
        """Span of the dilated kernel on each axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))

    def conv_sizes(self, sizes: Sequence[int]) -> tuple[int, ...]:
        """Output positions of a convolution (floor), for an input `sizes` that fits."""
        return tuple(
            (n + b + e - x) // s + 1
            for n, b, e, x, s in zip(sizes, self.begin, self.end, self.extent, self.strides)
        )

    def pool_sizes(self, sizes: Sequence[int], ceil_mode: bool) -> tuple[int, ...]:
        """Output positions of a pooling; in ceil mode a window starting in the end padding
        is dropped (ONNX, PyTorch). Otherwise onnxruntime's rule, which divides toward
        zero: an input shorter than the window (by less than a stride) still gives one
        window, over the elements it covers (a 1x1 image through a 2x2 / 2 pool), and a
        zero-sized output where it is a stride short or more; negative means no fit."""
        if not ceil_mode:
            out = []
            for n, b, e, x, s in zip(sizes, self.begin, self.end, self.extent, self.strides):
                room = n + b + e - x
                out.append((room // s if room >= 0 else -(-room // s)) + 1)
            return tuple(out)
        out = []
        for n, b, e, x, s in zip(sizes, self.begin, self.end, self.extent, self.strides):
            o = -(-(n + b + e - x) // s) + 1
            out.append(o - 1 if (o - 1) * s >= n + b else o)
        return tuple(out)

    def transposed_sizes(self, sizes: Sequence[int], output_padding: Sequence[int]):
        """Output size of a transposed convolution: the full scatter, cropped by the pads."""
        return tuple(
            s * (n - 1) + p + x - b - e
            for n, s, p, x, b, e in zip(
                sizes, self.strides, output_padding, self.extent, self.begin, self.end)
        )


def _per_axis(op: Op, name: str, values: tuple[int, ...], n: int, default: int, low: int):
    if not values:
        return (default,) * n
    if len(values) != n:
        raise ShapeError(f"{op.op_name}: {name} needs {n} entries, got {len(values)}")
    if any(v < low for v in values):
        raise ShapeError(f"{op.op_name}: {name} must be >= {low}, got {values}")
    return tuple(values)


class SamePad(enum.Enum):
    """ONNX auto_pad SAME_*: pad so that out = ceil(in / stride), the odd one at the end
    (upper) or the beginning (lower)."""

    UPPER = "SAME_UPPER"
    LOWER = "SAME_LOWER"

    def pads(self, sizes: Sequence[int], extents: Sequence[int],
             strides: Sequence[int]) -> tuple[int, ...]:
        """(begin..., end...) pads for inputs of spatial `sizes`."""
        totals = [max(0, (-(-n // s) - 1) * s + x - n) for n, x, s in zip(sizes, extents, strides)]
        small = [t // 2 for t in totals]
        big = [t - h for t, h in zip(totals, small)]
        return (*big, *small) if self is SamePad.LOWER else (*small, *big)


class _Sliding(OpMixin):
    """Mixin for ops with `strides`, `pads` and `dilations` attributes (and, for Conv and
    Pool, `same`: pads worked out from the input's sizes at run time)."""

    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]

    def window(self, kernel: Sequence[Dim], sizes: Sequence[int] = ()) -> Window:
        """The geometry over inputs of spatial `sizes` (needed only with `same`)."""
        n = len(kernel)
        if any(not isinstance(k, int) or k < 1 for k in kernel):
            raise ShapeError(f"{self.op_name}: kernel dims must be static and >= 1, "
                             f"got {tuple(kernel)}")
        strides = _per_axis(self, "strides", self.strides, n, 1, 1)
        dilations = _per_axis(self, "dilations", self.dilations, n, 1, 1)
        same: SamePad | None = getattr(self, "same", None)
        if same is None:
            pads = _per_axis(self, "pads", self.pads, 2 * n, 0, 0)
        elif self.pads or len(sizes) != n:
            raise ShapeError(f"{self.op_name}: {same.value} takes no pads and needs the "
                             f"{n} spatial sizes, got pads {self.pads}, sizes {tuple(sizes)}")
        else:
            extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]  # type: ignore
            pads = same.pads(sizes, extents, strides)
        return Window(tuple(kernel), strides, dilations,  # type: ignore[arg-type]
                      pads[:n], pads[n:])

    def attrs(self) -> dict[str, object]:
        """`same` only where it is set: files without it keep their bytes."""
        attrs = super().attrs()
        if attrs.get("same", 0) is None:
            del attrs["same"]
        return attrs


def _spatial(op: Op, sizes: Sequence[Dim], compute: Callable[[tuple[int, ...]], tuple],
             minimum: int = 1):
    """Output spatial dims from `compute` on the static sizes, UNKNOWN where a size is
    symbolic (a stand-in of 1 goes through `compute` there and is discarded); refuse a static
    result below `minimum`, which means the window does not fit."""
    out = compute(tuple(n if isinstance(n, int) else 1 for n in sizes))
    if any(o < minimum for n, o in zip(sizes, out) if isinstance(n, int)):
        raise ShapeError(f"{op.op_name}: the window does not fit the input spatial dims "
                         f"{list(sizes)} (would give {list(out)})")
    return [o if isinstance(n, int) else UNKNOWN for n, o in zip(sizes, out)]


def _check_image(op: Op, x: Shape, min_rank: int = 3) -> None:
    if x.rank < min_rank:
        raise ShapeError(f"{op.op_name}: input must be [N, C, *spatial] with rank >= "
                         f"{min_rank}, got {x}")


def _check_vector(op: Op, what: str, v: Shape, size: Dim) -> None:
    """A per-channel parameter: 1-D of `size` elements."""
    if v.rank != 1 or (isinstance(v.dims[0], int) and isinstance(size, int)
                       and v.dims[0] != size):
        raise ShapeError(f"{op.op_name}: {what} must be [{size}], got {v}")


def _divides(op: Op, what: str, size: Dim, groups: int) -> None:
    if isinstance(size, int) and size % groups:
        raise ShapeError(f"{op.op_name}: {what} {size} is not divisible by groups={groups}")


def _check_groups(op: Op, groups: int, channels: Dim) -> None:
    if groups < 1:
        raise ShapeError(f"{op.op_name}: groups must be >= 1, got {groups}")
    _divides(op, "input channels", channels, groups)


def _check_channels(op: Op, c: Dim, expected: Dim, what: str) -> None:
    if isinstance(c, int) and isinstance(expected, int) and c != expected:
        raise ShapeError(f"{op.op_name}: x has {c} channels but w expects {what}")


def _unidirectional(op: Op, what: str, x: Shape, other: Shape) -> None:
    """`other` must broadcast to `x` without changing `x`'s shape (ONNX unidirectional)."""
    try:
        fits = other.rank <= x.rank and all(
            d in (xd, UNKNOWN) for d, xd in zip(broadcast_dims(x.dims, other.dims), x.dims))
    except ShapeError:
        fits = False
    if not fits:
        raise ShapeError(f"{op.op_name}: {what} {other} does not broadcast to {x}")


# -- convolution ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Conv(_Sliding, Op):
    """N-d convolution (ONNX Conv). Inputs `[x, w]` or `[x, w, b]`: x `[N, C, *spatial]`,
    w `[M, C/groups, *kernel]`, b `[M]`; output `[N, M, *out]`."""

    strides: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    groups: int = 1
    same: SamePad | None = None
    arity: ClassVar = (2, 3)

    def infer(self, inputs):
        expect_dtype(self, inputs, floating=True)
        x, w = inputs[:2]
        _check_image(self, x)
        if w.rank != x.rank:
            raise ShapeError(f"Conv: w must have the rank of x, got x {x} and w {w}")
        m, per_group = w.dims[:2]
        _check_groups(self, self.groups, x.dims[1])
        if isinstance(per_group, int):
            _check_channels(self, x.dims[1], per_group * self.groups,
                            f"{per_group} x groups={self.groups}")
        _divides(self, "output channels", m, self.groups)
        if len(inputs) == 3:
            _check_vector(self, "bias", inputs[2], m)
        kernel = w.dims[2:]
        out = _spatial(self, x.dims[2:], lambda n: self.window(kernel, n).conv_sizes(n))
        return Shape((x.dims[0], m, *out), x.dtype)


@dataclass(frozen=True)
class ConvTranspose(_Sliding, Op):
    """N-d transposed convolution (ONNX ConvTranspose, explicit pads). Inputs `[x, w]` or
    `[x, w, b]`: x `[N, C, *spatial]`, w `[C, M/groups, *kernel]`, b `[M]`; output
    `[N, M, *out]` with out = stride*(in-1) + output_padding + extent - pad_begin - pad_end."""

    strides: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    groups: int = 1
    output_padding: tuple[int, ...] = ()
    arity: ClassVar = (2, 3)

    def resolved_output_padding(self, n: int) -> tuple[int, ...]:
        return _per_axis(self, "output_padding", self.output_padding, n, 0, 0)

    def infer(self, inputs):
        expect_dtype(self, inputs, floating=True)
        x, w = inputs[:2]
        _check_image(self, x)
        if w.rank != x.rank:
            raise ShapeError(f"ConvTranspose: w must have the rank of x, got x {x} and w {w}")
        _check_groups(self, self.groups, x.dims[1])
        _check_channels(self, x.dims[1], w.dims[0], str(w.dims[0]))
        m = w.dims[1] * self.groups if isinstance(w.dims[1], int) else UNKNOWN
        if len(inputs) == 3:
            _check_vector(self, "bias", inputs[2], m)
        win = self.window(w.dims[2:])
        extra = self.resolved_output_padding(x.rank - 2)
        if any(p >= max(s, d) for p, s, d in zip(extra, win.strides, win.dilations)):
            raise ShapeError(f"ConvTranspose: output_padding {extra} must be below the stride "
                             f"or the dilation on each axis")
        out = _spatial(self, x.dims[2:], lambda n: win.transposed_sizes(n, extra))
        return Shape((x.dims[0], m, *out), x.dtype)


# -- pooling --------------------------------------------------------------------------------
class PoolKind(enum.Enum):
    MAX = "max"
    AVG = "avg"


def _check_pool_dtype(op: Op, kind: PoolKind, x: Shape) -> None:
    # max pooling is defined for integers too (ONNX MaxPool takes int8 / uint8)
    if x.dtype is DType.BOOL or (kind is PoolKind.AVG and not x.dtype.is_float):
        raise ShapeError(f"{op.op_name} {kind.value}: unsupported dtype {x.dtype}")


@dataclass(frozen=True)
class Pool(_Sliding, Op):
    """N-d max / average pooling (ONNX MaxPool, AveragePool; first output only).

    Max pads with -inf (integers: their lowest value); average divides by the window's real
    elements, or with `count_include_pad` by its elements inside the explicit pads. Each pad
    must be smaller than the dilated kernel, so that no window lies wholly in the padding.
    """

    kind: PoolKind
    kernel: tuple[int, ...]
    strides: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    ceil_mode: bool = False
    count_include_pad: bool = False
    same: SamePad | None = None

    def infer(self, inputs):
        (x,) = inputs
        _check_pool_dtype(self, self.kind, x)
        if x.rank != len(self.kernel) + 2:
            raise ShapeError(f"Pool: a {len(self.kernel)}-d kernel needs a rank-"
                             f"{len(self.kernel) + 2} input, got {x}")
        sizes = x.dims[2:]
        win = self.window(self.kernel, [n if isinstance(n, int) else 1 for n in sizes])
        if any(p >= e for p, e in zip(win.begin + win.end, win.extent * 2)):
            raise ShapeError(f"Pool: pads {win.begin + win.end} must be smaller than the "
                             f"kernel extent {win.extent}")
        out = _spatial(self, sizes, lambda n: self.window(self.kernel, n).pool_sizes(
            n, self.ceil_mode), minimum=0)
        return x.with_dims((*x.dims[:2], *out))


@dataclass(frozen=True)
class GlobalPool(Op):
    """Max / mean over all spatial dims of `[N, C, *spatial]`, keeping them as size 1."""

    kind: PoolKind

    def infer(self, inputs):
        (x,) = inputs
        _check_pool_dtype(self, self.kind, x)
        _check_image(self, x, min_rank=2)
        return x.with_dims((*x.dims[:2], *(1 for _ in x.dims[2:])))


# -- softmax and normalisation ---------------------------------------------------------------
def _infer_along_axis(op: Op, axis: int, inputs: Sequence[Shape]) -> Shape:
    (x,) = inputs
    expect_dtype(op, inputs, floating=True)
    if x.rank == 0:
        raise ShapeError(f"{op.op_name}: needs rank >= 1, got {x}")
    op_axis(op, axis, x.rank)
    return x


@dataclass(frozen=True)
class Softmax(Op):
    """Softmax along one axis (ONNX opset 13+)."""

    axis: int = -1

    def infer(self, inputs):
        return _infer_along_axis(self, self.axis, inputs)


@dataclass(frozen=True)
class LogSoftmax(Op):
    """log(softmax(x)) along one axis (ONNX opset 13+), without forming the softmax."""

    axis: int = -1

    def infer(self, inputs):
        return _infer_along_axis(self, self.axis, inputs)


@dataclass(frozen=True)
class LayerNorm(Op):
    """ONNX LayerNormalization (first output): standardise over axes `axis..rank-1`, then
    `* scale (+ bias)`; inputs `[x, scale]` or `[x, scale, bias]`, both broadcasting to x."""

    axis: int = -1
    epsilon: float = 1e-5
    arity: ClassVar = (2, 3)

    def infer(self, inputs):
        expect_dtype(self, inputs, floating=True)
        x = inputs[0]
        op_axis(self, self.axis, x.rank)
        for what, p in zip(("scale", "bias"), inputs[1:]):
            _unidirectional(self, what, x, p)
        return x


def _check_channel_params(op: Op, inputs: Sequence[Shape], names: Sequence[str]) -> Shape:
    expect_dtype(op, inputs, floating=True)
    x = inputs[0]
    for what, p in zip(names, inputs[1:]):
        _check_vector(op, what, p, x.dims[1])
    return x


@dataclass(frozen=True)
class BatchNormInference(Op):
    """ONNX BatchNormalization in inference mode: inputs `[x, scale, bias, mean, var]`, the
    last four `[C]` over channel axis 1 of x `[N, C, ...]`."""

    epsilon: float = 1e-5
    arity: ClassVar = (5, 5)

    def infer(self, inputs):
        _check_image(self, inputs[0], min_rank=2)
        return _check_channel_params(self, inputs, ("scale", "bias", "mean", "var"))


@dataclass(frozen=True)
class InstanceNorm(Op):
    """ONNX InstanceNormalization: standardise each (n, c) over the spatial dims, then
    `* scale + bias` per channel; inputs `[x, scale, bias]`."""

    epsilon: float = 1e-5
    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        _check_image(self, inputs[0])
        return _check_channel_params(self, inputs, ("scale", "bias"))


@dataclass(frozen=True)
class PRelu(Op):
    """`x < 0 ? slope * x : x`, slope broadcasting to x (ONNX PRelu, unidirectional)."""

    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        expect_dtype(self, inputs)
        x, slope = inputs
        if x.dtype is DType.BOOL:
            raise ShapeError("PRelu: needs a numeric input, got bool")
        _unidirectional(self, "slope", x, slope)
        return x


# -- resize ---------------------------------------------------------------------------------
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
        return dataclasses.replace(self, sizes=sizes, scales=scales, roi=roi, operands=())

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
