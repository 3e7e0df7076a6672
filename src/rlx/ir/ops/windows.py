"""Sliding-window ops: convolution (plain and transposed) and pooling (windowed and global).

Semantics are ONNX's. The ONNX importer resolves opset quirks (auto_pad, optional inputs
given as constants) into explicit attributes, so every op here is fully spelled out. They
take per-spatial-axis tuples; `pads` is `(begin_0, ..., begin_n-1, end_0, ..., end_n-1)`,
and an empty `strides` / `dilations` / `pads` / `output_padding` means the ONNX default (all
1 / all 0). `Window` resolves them once, for `infer` and the kernels alike. Conv and Pool may
instead take `same` (ONNX auto_pad SAME_UPPER / SAME_LOWER) where the pads depend on a size
known only at run time: `Window` then works them out from the input's actual spatial sizes.
A family of their own (not rlx.ir.ops.nn): a model without them, a transformer, imports
neither these classes nor their kernels (rlx.kernels.windows).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, OpMixin, check_image, check_vector, expect_dtype
from rlx.ir.shape import UNKNOWN, Dim, Shape
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["SamePad", "Conv", "ConvTranspose", "PoolKind", "Pool", "GlobalPool"]


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


# -- convolution ----------------------------------------------------------------------------
def _image_and_weight(op: Conv | ConvTranspose, inputs) -> tuple[Shape, Shape]:
    """(x, w) of a convolution, checked: float, x an image, w of x's rank, groups dividing
    x's channels."""
    expect_dtype(op, inputs, floating=True)
    x, w = inputs[:2]
    check_image(op, x)
    if w.rank != x.rank:
        raise ShapeError(f"{op.op_name}: w must have the rank of x, got x {x} and w {w}")
    _check_groups(op, op.groups, x.dims[1])
    return x, w


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
        x, w = _image_and_weight(self, inputs)
        m, per_group = w.dims[:2]
        if isinstance(per_group, int):
            _check_channels(self, x.dims[1], per_group * self.groups,
                            f"{per_group} x groups={self.groups}")
        _divides(self, "output channels", m, self.groups)
        if len(inputs) == 3:
            check_vector(self, "bias", inputs[2], m)
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
        x, w = _image_and_weight(self, inputs)
        _check_channels(self, x.dims[1], w.dims[0], str(w.dims[0]))
        m = w.dims[1] * self.groups if isinstance(w.dims[1], int) else UNKNOWN
        if len(inputs) == 3:
            check_vector(self, "bias", inputs[2], m)
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
        check_image(self, x, min_rank=2)
        return x.with_dims((*x.dims[:2], *(1 for _ in x.dims[2:])))
