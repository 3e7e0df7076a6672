"""Kernels of the integer quantisation ops (`rlx.ir.ops.quant`), exact like onnxruntime's.

MatMulInteger runs as float32 GEMMs, which BLAS makes fast where NumPy's integer matmul is
a plain loop (a 512 x 32128 int32 product took 163 ms). That is exact, not approximate:
the centred operands are integers with |a - a_zero| <= A and |b - b_zero| <= B, so every
product is an integer of at most A*B and every partial sum, in whatever order BLAS adds
(blocked, vectorised, fused multiply-add), an integer of at most k*A*B for k terms of K.
float32 holds every integer up to 2^24 exactly, so a product over k <= 2^24 / (A*B) terms
is exact. K is cut into such chunks (258 terms when A = B = 255, the widest 8-bit
difference; 518 for uint8 activations against symmetric int8 weights, A = 255, B = 127),
and their exact partial sums are added in int64, then wrapped to int32 as onnxruntime's
accumulator would. A is read off the zero points and the operand's type; B is measured once
on a constant weight, whose centred float32 copy is kept (`rlx.kernels.quant.kept`) instead
of being made on every call.

A tighter bound decides first, for a K past the chunk: every partial sum of row m's product
with a column is at most sum_k |a[m, k]| * B in magnitude, whatever the order, so one
float32 GEMM over the whole of K is exact when the largest row sum of |a| times B is within
2^24 (the row sums taken in float64, one pass over the activations, which are M x K where
the weight is K x N). Quantised ReLU outputs are mostly zero, so a feed-forward network's
down projection (K = 4 d_model) is typically one GEMM, not four.

A constant weight multiplied by a few rows (a decoder's tokens) is kept in blocks of
`BLOCK_COLUMNS` columns, `[N / 32, K, 32]`, one small GEMM per block: OpenBLAS packs the
whole of a `[K, N]` operand on every call, so 8 rows times a 512 x 32128 weight took 9.1 ms
as one GEMM and 3.2 ms in blocks (one row: 2.6 and 2.2 ms; at 64 rows one GEMM is faster),
and the order of the sums does not matter to an exact product.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from rlx.ir.ops.quant import DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QuantizeLinear
from rlx.kernels.quant import kept
from rlx.kernels.registry import kernel, staged

__all__ = ["BLOCK_COLUMNS", "BLOCKED_ROWS", "EXACT_FLOAT32", "exact_terms", "row_bound",
           "integer_product", "widest", "centred", "centred_weight", "weight_product",
           "KeptWeight"]

EXACT_FLOAT32 = 1 << 24
"""Every integer of magnitude up to this is a float32."""

BLOCK_COLUMNS = 32
"""Columns per block of a kept weight (32 and 64 measured alike for 8-16 rows, 32 better for
one row, 128 slower)."""

BLOCKED_ROWS = 32
"""Products with up to this many rows read a constant weight's blocks (at 32 rows blocks and
one GEMM took the same time)."""


def exact_terms(bound_a: int, bound_b: int) -> int:
    """How many products of |a| <= bound_a and |b| <= bound_b float32 sums exactly."""
    largest = bound_a * bound_b
    return EXACT_FLOAT32 // largest if largest else EXACT_FLOAT32


def row_bound(a: np.ndarray) -> float:
    """The largest sum of |a| along the last axis (float64: exact for any 8-bit row)."""
    return float(np.abs(a).sum(axis=-1, dtype=np.float64).max(initial=0.0))


def integer_product(a: np.ndarray, b: np.ndarray, bound_a: int, bound_b: int,
                    columns: int | None = None) -> np.ndarray:
    """a @ b (float32 arrays of integers bounded as said), exactly, as int32. With
    `columns`, b is a `[K, columns]` weight in `_blocks` and a has two axes."""
    k = a.shape[-1]
    lead = None
    if a.ndim > 2 and b.ndim == 2:  # one GEMM over every row
        lead, a = a.shape[:-1], a.reshape(-1, k)
    step = exact_terms(bound_a, bound_b)
    if k > step and row_bound(a) * bound_b <= EXACT_FLOAT32:
        step = k
    if k <= step:
        out = np.matmul(a, b).astype(np.int32)
    else:
        total = np.matmul(a[..., :step], b[..., :step, :]).astype(np.int64)
        for start in range(step, k, step):
            part = np.matmul(a[..., start:start + step], b[..., start:start + step, :])
            total += part.astype(np.int64)
        out = total.astype(np.int32)  # wraps past 2^31, as an int32 accumulator does
    if columns is not None:
        out = _unblocked(out, columns)
    return out if lead is None else out.reshape(*lead, out.shape[-1])


def _blocks(values: np.ndarray) -> np.ndarray:
    """A [K, N] weight as [ceil(N / BLOCK_COLUMNS), K, BLOCK_COLUMNS], zero-padded."""
    k, n = values.shape
    count = -(-n // BLOCK_COLUMNS)
    padded = np.zeros((k, count * BLOCK_COLUMNS), values.dtype)
    padded[:, :n] = values
    return np.ascontiguousarray(padded.reshape(k, count, BLOCK_COLUMNS).transpose(1, 0, 2))


def _unblocked(out: np.ndarray, columns: int) -> np.ndarray:
    """The [M, N] product from its [blocks, M, BLOCK_COLUMNS] pieces."""
    rows = out.shape[1]
    flat = np.ascontiguousarray(out.transpose(1, 0, 2)).reshape(rows, -1)
    return flat if flat.shape[1] == columns else np.ascontiguousarray(flat[:, :columns])


def widest(dtype: np.dtype, zero: np.ndarray) -> int:
    """The largest |x - zero| an x of `dtype` can have."""
    low, high = _limits(np.dtype(dtype))
    if zero.size == 1:  # per tensor: Python ints, no array work
        point = int(zero.reshape(-1)[0])
        return max(point - low, high - point)
    points = zero.astype(np.int64)
    return int(max(points.max() - low, high - points.min()))


@functools.cache
def _limits(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def centred(x: np.ndarray, zero: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """x - zero in float32, the zero point reshaped to `shape` to broadcast against x."""
    return x.astype(np.float32) - zero.astype(np.float32).reshape(shape)


def centred_weight(b: np.ndarray, zero: np.ndarray,
                   shape: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """b - zero (reshaped to `shape`) in float32 and the largest |value| in it; kept for a
    constant b."""
    return _kept_layout(b, zero, shape, blocked=False) or (centred(b, zero, shape),
                                                           widest(b.dtype, zero))


def _weight_bound(b: np.ndarray, zero: np.ndarray, values: np.ndarray) -> int:
    """The largest |b - zero| of a kept weight, measured once on its centred `values`."""
    bound = kept((b, zero), ("bound",), 8,
                 lambda: np.asarray(np.abs(values).max(initial=0), np.int64))
    return widest(b.dtype, zero) if bound is None else int(bound)


class KeptWeight:
    """One node's memo of `kept`: the layout (blocks or centred copy) and bound of the last
    constant weight it saw, found again by identity; a `kept` lookup builds its key from the
    arrays' addresses, ~5 us a call, a third of a 512 x 512 product's time at one row.
    Concurrent runs at worst look the weight up again."""

    def __init__(self) -> None:
        self._last: tuple = (None, None, False, None)

    def __call__(self, b: np.ndarray, zero: np.ndarray, shape: tuple[int, ...],
                 blocked: bool) -> tuple[np.ndarray, int] | None:
        """(layout, bound) of a constant b; None when b can change between runs."""
        last = self._last  # read once: a concurrent run may replace it
        if last[0] is b and last[1] is zero and last[2] == blocked:
            return last[3]
        found = _kept_layout(b, zero, shape, blocked)
        if found is not None:
            self._last = (b, zero, blocked, found)
        return found


def _kept_layout(b: np.ndarray, zero: np.ndarray, shape: tuple[int, ...],
                 blocked: bool) -> tuple[np.ndarray, int] | None:
    if not blocked:
        values = kept((b, zero), ("centred",), b.size * 4, lambda: centred(b, zero, shape))
    else:
        nbytes = -(-b.shape[1] // BLOCK_COLUMNS) * b.shape[0] * BLOCK_COLUMNS * 4
        values = kept((b, zero), ("blocks",), nbytes, lambda: _blocks(centred(b, zero, shape)))
    return None if values is None else (values, _weight_bound(b, zero, values))


def weight_product(a: np.ndarray, bound_a: int, b: np.ndarray, zero: np.ndarray,
                   shape: tuple[int, ...], weights: KeptWeight | None = None) -> np.ndarray:
    """a @ (b - zero) exactly, as int32, a centred; a constant two-axis b is read from its
    kept blocks when a has at most `BLOCKED_ROWS` rows (a model run with both few and many
    rows keeps both layouts). `weights`: the calling node's memo."""
    count = math.prod(a.shape[:-1])
    blocked = b.ndim == 2 and count <= BLOCKED_ROWS
    found = (weights or KeptWeight())(b, zero, shape, blocked)
    if found is None:
        return integer_product(a, centred(b, zero, shape), bound_a, widest(b.dtype, zero))
    if not blocked:
        return integer_product(a, found[0], bound_a, found[1])
    out = integer_product(a.reshape(count, a.shape[-1]), found[0], bound_a, found[1],
                          columns=b.shape[1])
    return out.reshape(*a.shape[:-1], b.shape[1])


@staged(MatMulInteger)
def build_matmul_integer(node, compile):
    weights = KeptWeight()

    def step(a, b, a_zero, b_zero):
        row_zero = (-1, 1) if a_zero.ndim == 1 and a_zero.size > 1 else a_zero.shape
        return weight_product(centred(a, a_zero, row_zero), widest(a.dtype, a_zero), b,
                              b_zero, b_zero.shape, weights)

    return step


def _broadcast_parameter(param: np.ndarray, x_shape: tuple[int, ...], axis: int,
                        block_size: int) -> np.ndarray:
    """A scale or zero point shaped to broadcast against x: per tensor as it is, per axis
    along `axis`, blocked repeated `block_size` times along `axis` and cut to x's size."""
    if param.ndim == 0 or (param.size == 1 and not block_size):
        return param.reshape(())
    axis %= len(x_shape)
    if block_size:
        return np.repeat(param, block_size, axis).take(np.arange(x_shape[axis]), axis)
    return param.reshape([-1 if i == axis else 1 for i in range(len(x_shape))])


def _parameters(node, x, scale, zero) -> tuple[np.ndarray, np.ndarray]:
    op = node.op
    return (_broadcast_parameter(scale.astype(np.float32), x.shape, op.axis, op.block_size),
            _broadcast_parameter(zero.astype(np.float32), x.shape, op.axis, op.block_size))


def _quantized(x: np.ndarray, scale, zero, dtype: np.dtype) -> np.ndarray:
    """saturate(round_half_even(x / scale) + zero) in `dtype`, in float32."""
    low, high = _limits(dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.asarray(np.divide(x.astype(np.float32, copy=False), scale, dtype=np.float32))
    np.rint(y, out=y)  # one buffer for every step after the division (rank 0 too)
    y += zero
    np.maximum(y, low, out=y)  # two ufuncs: np.clip's wrapper costs more than both
    np.minimum(y, high, out=y)
    return y.astype(dtype)


@kernel(QuantizeLinear)
def quantize_linear(node, x, scale, zero):
    scale, centre = _parameters(node, x, scale, zero)
    return _quantized(x, scale, centre, zero.dtype)


@kernel(DequantizeLinear)
def dequantize_linear(node, x, scale, zero):
    def make() -> np.ndarray:
        factor, centre = _parameters(node, x, scale, zero)
        return ((x.astype(np.float32) - centre) * factor).astype(node.shape.dtype.numpy)

    value = kept((x, scale, zero), (node.op,), x.size * node.shape.dtype.numpy.itemsize, make)
    return make() if value is None else value


@kernel(DynamicQuantizeLinear)
def dynamic_quantize_linear(node, x):
    """onnxruntime's arithmetic: scale = (max(x, 0) - min(x, 0)) / 255 in float32 (1 for
    an all-zero x), zero point = saturate(round(-min / scale)), y = saturate(round(x /
    scale) + zero)."""
    lo = np.float32(min(x.min(initial=0.0), 0.0))
    hi = np.float32(max(x.max(initial=0.0), 0.0))
    scale = (hi - lo) / np.float32(255) if hi != lo else np.float32(1)
    # Python's min and max on float32 scalars: np.clip's wrapper cost more than the rest
    zero = min(max(np.rint(np.float32(0) - lo / scale), np.float32(0)), np.float32(255))
    return _quantized(x, scale, zero, np.dtype(np.uint8)), np.asarray(scale, np.float32), \
        np.asarray(zero, np.uint8)
