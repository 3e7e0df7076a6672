"""Signal processing: DFT, STFT as matrix products with cosine/sine tables; mel filters.

A DFT of a length known at import is rlx's DFT op (an FFT in the signal's precision, as
onnx.reference computes it). Otherwise, and for STFT's frames, a transform along one axis
of N points is `real @ C + imag @ S` (and the like for the imaginary part) with
C[j, k] = cos(2 pi j k / N), S = sin(...), the 1/N of the inverse and the one-sided
weights of irfft folded into the tables. The tables are constants when the sizes are known
at import (the ONNX export of the DFT op uses them too), and are built from Range/Cos/Sin
(in float64, with j * k reduced mod N first so the angle stays exact) when they are known
only at run time. A DFT axis given at run time becomes a chain of If nodes, one branch per
possible axis.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from rlx.ir import (
    DFT,
    Activation,
    BinaryOp,
    CompareOp,
    DType,
    Gather,
    LogicalOp,
    Range,
    Slice,
)
from rlx.onnx.emit import Emitter
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter
from rlx.onnx.switch import normalized_axis, per_axis
from rlx.onnx.tensors import dtype_of

__all__ = ["Run", "Length", "Kind", "dft_tables", "transform_last", "dft", "dft_", "stft",
           "mel_weight_matrix"]


@dataclass(frozen=True)
class Run:
    """A size known only at run time: the id of a rank-0 i64 node (static sizes are ints)."""

    id: int


Length = int | Run


class Kind(enum.Enum):
    FORWARD = "forward"
    INVERSE = "inverse"
    IRFFT = "irfft"  # inverse of a one-sided spectrum: real output


def _tables(s: Emitter, rows: Length, cols: Length, n: Length, kind: Kind,
            dtype: DType) -> tuple[int, int]:
    """(C, S) tables [rows, cols]; rows index inputs, cols outputs."""
    if isinstance(rows, int) and isinstance(cols, int) and isinstance(n, int):
        c, sn = dft_tables(rows, cols, n, kind)
        return s.const(c.astype(dtype.numpy)), s.const(sn.astype(dtype.numpy))
    n_id = _node(s, n)
    zero, one = s.scalar(0, DType.I64), s.scalar(1, DType.I64)
    j = s.unsqueeze(s.emit(Range(), zero, _node(s, rows), one), (1,))
    k = s.unsqueeze(s.emit(Range(), zero, _node(s, cols), one), (0,))
    turns = s.cast(s.binary(BinaryOp.MOD, s.mul(j, k), n_id), DType.F64)
    n64 = s.cast(n_id, DType.F64)
    angle = s.mul(turns, s.div(s.scalar(2 * np.pi, DType.F64), n64))
    scale = s.scalar(1.0, DType.F64)
    if kind is Kind.IRFFT:
        edge = s.logical(LogicalOp.OR, s.compare(CompareOp.EQ, j, zero),
                         s.compare(CompareOp.EQ, s.mul(j, s.scalar(2, DType.I64)), n_id))
        scale = s.where(edge, s.scalar(1.0, DType.F64), s.scalar(2.0, DType.F64))
    if kind is not Kind.FORWARD:
        scale = s.div(scale, n64)
    cos, sin = (s.cast(s.mul(s.unary(f, angle), scale), dtype)
                for f in (Activation.COS, Activation.SIN))
    return cos, sin


def dft_tables(rows: int, cols: int, n: int, kind: Kind) -> tuple[np.ndarray, np.ndarray]:
    """`_tables` of static sizes, as float64 arrays (the ONNX export's DFT uses them too)."""
    j, k = np.arange(rows)[:, None], np.arange(cols)[None, :]
    angle = 2 * np.pi * ((j * k) % max(n, 1)) / max(n, 1)
    scale = np.ones((rows, 1))
    if kind is Kind.IRFFT:
        scale = np.where((j == 0) | (2 * j == n), 1.0, 2.0)
    if kind is not Kind.FORWARD:
        scale = scale / n
    return np.cos(angle) * scale, np.sin(angle) * scale


def _node(s: Emitter, value: Length) -> int:
    return s.scalar(value, DType.I64) if isinstance(value, int) else value.id


def transform_last(s: Emitter, real: int, imag: int | None, n: Length, count: Length,
                   kind: Kind):
    """DFT along the last axis of `real` (and `imag`; None = a real signal) of n points,
    `count` outputs. Returns (real, imag or None for IRFFT's real output)."""
    length = _length(s, real, -1)
    rows = _minimum(s, length, n if kind is not Kind.IRFFT else _half(s, n))
    if rows != length:
        real = _head(s, real, rows)
        imag = None if imag is None else _head(s, imag, rows)
    c, sn = _tables(s, rows, count, n, kind, s.dtype(real))
    sign = -1 if kind is Kind.FORWARD else 1
    re = s.matmul(real, c)
    im = None if kind is Kind.IRFFT else s.mul(s.matmul(real, sn), s.like(sign, re))
    if imag is not None:
        # (R + iI)(C -/+ iS): real part R C +/- I S, imaginary part I C -/+ R S
        re = s.add(re, s.mul(s.matmul(imag, sn), s.like(-sign, re)))
        if im is not None:
            im = s.add(im, s.matmul(imag, c))
    return re, im


def _half(s: Emitter, n: Length) -> Length:
    """n // 2 + 1: the bins of a one-sided spectrum."""
    if isinstance(n, int):
        return n // 2 + 1
    return Run(s.add(s.div(n.id, s.scalar(2, DType.I64)), s.scalar(1, DType.I64)))


def _minimum(s: Emitter, a: Length, b: Length) -> Length:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return Run(s.binary(BinaryOp.MIN, _node(s, a), _node(s, b)))


def _head(s: Emitter, x: int, count: Length) -> int:
    """The first `count` entries of x's last axis."""
    if isinstance(count, int):
        return s.slice(x, (0,), (count,), (-1,))
    zero = s.const(np.zeros(1, np.int64))
    return s.emit(Slice(), x, zero, s.reshape(count.id, (1,)),
                  s.const(np.array([-1], np.int64)))


def _parts(s: Emitter, x: int) -> tuple[int, int | None]:
    """Real and imaginary parts of an ONNX signal [..., 1 or 2] (last axis dropped)."""
    width = s.shape(x).dims[-1]
    real = s.take(x, 0, -1)
    return real, (s.take(x, 1, -1) if width == 2 else None)


def _stack(s: Emitter, real: int, imag: int | None) -> int:
    """[..., 2] (or [..., 1] for a real result) from the parts."""
    parts = [s.unsqueeze(real, (-1,))] + ([] if imag is None else [s.unsqueeze(imag, (-1,))])
    return s.concat(parts, -1)


def dft(s: Emitter, x: int, axis: int, n: Length, kind: Kind, onesided: bool) -> int:
    """ONNX DFT of x [..., signal, 1 or 2] along `axis` (static), computed in float64
    (like ONNX's reference) and returned in x's dtype."""
    dtype = s.dtype(x)
    x = s.cast(x, DType.F64)
    rank = s.rank(x)
    axis %= rank
    perm = [a for a in range(rank - 1) if a != axis] + [axis]
    back = [perm.index(a) for a in range(rank - 1)]
    real, imag = _parts(s, x)
    real = s.transpose(real, perm)
    imag = None if imag is None else s.transpose(imag, perm)
    count = _half(s, n) if kind is not Kind.IRFFT and onesided else n
    re, im = transform_last(s, real, imag, n, count, kind)
    re = s.transpose(re, back)
    im = None if im is None else s.transpose(im, back)
    return s.cast(_stack(s, re, im), dtype)


def _length(s: Emitter, x: int, axis: int) -> Length:
    """A dim, static or at run time."""
    dim = s.shape(x).dims[axis]
    return dim if isinstance(dim, int) else Run(s.dim(x, axis))


def _operand(n: NodeContext, i: int) -> Length:
    """A one-element integer input as a length."""
    known = n.static(i)
    if known is not None:
        return int(known.reshape(()))
    return Run(n.s.reshape(n.s.cast(n.input(i), DType.I64), ()))


@converter("DFT")
def dft_(n: NodeContext) -> int:
    s = n.s
    x = n.input(0)
    inverse, onesided = bool(n.attr("inverse", 0)), bool(n.attr("onesided", 0))
    kind = Kind.IRFFT if inverse and onesided else Kind.INVERSE if inverse else Kind.FORWARD
    if n.opset < 20:
        axis: int | None = n.attr("axis", 1)
    else:
        axis = int(n.static_scalar(2)) if n.static(2) is not None else \
            (-2 if not n.has(2) else None)
    length = _operand(n, 1) if n.has(1) else None

    def along(a: int, s: Emitter, x: int) -> int:
        size = length
        if size is None:
            size = _length(s, x, a)
            if kind is Kind.IRFFT:  # a one-sided spectrum of L bins: 2 (L - 1) points
                size = 2 * (size - 1) if isinstance(size, int) else Run(s.mul(
                    s.sub(size.id, s.scalar(1, DType.I64)), s.scalar(2, DType.I64)))
        if isinstance(size, int):
            return s.emit(DFT(a, size, inverse, onesided), x)
        return dft(s, x, a, size, kind, onesided)

    if axis is not None:
        return along(axis, s, x)
    rank = s.rank(x)  # any axis but the last (real/imaginary) one
    return per_axis(s, x, normalized_axis(s, n.input(2), rank), rank - 1, along)


@converter("STFT")
def stft(n: NodeContext) -> int:
    """Frames gathered at run-time offsets, windowed, then a DFT along the frame axis."""
    s = n.s
    x = n.input(0)
    step = s.reshape(s.cast(n.input(1), DType.I64), ())
    window = n.input(2) if n.has(2) else None
    if n.has(3):
        size = _operand(n, 3)
    elif window is not None:
        size = _length(s, window, 0)
    else:
        size = _length(s, x, -2)
    width = _length(s, window, 0) if window is not None else size
    zero, one = s.scalar(0, DType.I64), s.scalar(1, DType.I64)
    signal = _node(s, _length(s, x, -2))
    frames = s.add(s.div(s.sub(signal, _node(s, width)), step), one)
    starts = s.mul(s.emit(Range(), zero, frames, one), step)
    offsets = s.emit(Range(), zero, _node(s, width), one)
    index = s.add(s.unsqueeze(starts, (1,)), s.unsqueeze(offsets, (0,)))  # [F, W]
    framed = s.emit(Gather(s.rank(x) - 2), x, index)  # [B, F, W, 1 or 2]
    if window is not None:
        framed = s.mul(framed, s.reshape(s.cast(window, s.dtype(x)), (-1, 1)))
    onesided = bool(n.attr("onesided", 1))
    return dft(s, framed, -2, size, Kind.FORWARD, onesided)


@converter("MelWeightMatrix")
def mel_weight_matrix(n: NodeContext) -> int:
    """Triangular mel filters over the bins of a one-sided spectrum, with ONNX's reference
    formulas (float64, bin edges floored), all sizes at run time."""
    s = n.s
    f64, i64 = DType.F64, DType.I64
    mels, length, rate = (s.reshape(s.cast(n.input(i), i64), ()) for i in range(3))
    low, high = (s.reshape(s.cast(n.input(i), f64), ()) for i in (3, 4))
    zero, one = s.scalar(0, i64), s.scalar(1, i64)

    def to_mel(hz: int) -> int:  # 2595 log10(1 + hz / 700)
        ratio = s.add(s.div(hz, s.scalar(700.0, f64)), s.scalar(1.0, f64))
        return s.mul(s.unary(Activation.LOG, ratio), s.scalar(2595 / np.log(10), f64))

    edges = s.add(mels, s.scalar(2, i64))
    step = s.div(s.sub(to_mel(high), to_mel(low)), s.cast(edges, f64))
    mel = s.add(s.mul(s.cast(s.emit(Range(), zero, edges, one), f64), step), to_mel(low))
    hz = s.mul(s.sub(s.unary(Activation.EXP, s.mul(mel, s.scalar(np.log(10) / 2595, f64))),
                     s.scalar(1.0, f64)), s.scalar(700.0, f64))
    scaled = s.div(s.mul(s.cast(s.add(length, one), f64), hz), s.cast(rate, f64))
    bins = s.cast(s.unary(Activation.FLOOR, scaled), i64)
    lo, center, hi = (s.unsqueeze(s.emit(Slice(), bins, s.reshape(start, (1,)), s.reshape(
        s.add(start, mels), (1,))), (0,)) for start in (zero, one, s.scalar(2, i64)))
    spectrum = s.add(s.div(length, s.scalar(2, i64)), one)
    j = s.unsqueeze(s.emit(Range(), zero, spectrum, one), (1,))  # [bins, 1]
    up = s.sub(center, lo)
    down = s.sub(hi, center)

    def ratio(num: int, den: int) -> int:
        safe = s.binary(BinaryOp.MAX, den, one)
        return s.div(s.cast(num, f64), s.cast(safe, f64))

    rising = s.where(s.compare(CompareOp.GT, up, zero), ratio(s.sub(j, lo), up),
                     s.cast(s.compare(CompareOp.EQ, j, center), f64))
    in_rise = s.logical(LogicalOp.AND, s.compare(CompareOp.GE, j, lo),
                        s.compare(CompareOp.LE, j, center))
    in_fall = s.logical(LogicalOp.AND, s.compare(CompareOp.GE, j, center),
                        s.compare(CompareOp.LT, j, hi))
    out = s.where(in_fall, ratio(s.sub(hi, j), down),
                  s.where(in_rise, rising, s.scalar(0.0, f64)))
    dtype = dtype_of(n.attr("output_datatype", 1), f"{n.label} output_datatype")
    return s.cast(out, dtype)
