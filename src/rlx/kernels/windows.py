"""Sliding-window kernels: convolution (plain and transposed), pooling (windowed and global).

They loop over kernel *taps*, never over positions: for one tap, the input elements it meets
at every output position form one strided slice of the padded input (`_taps`). Convolution
reads all taps at once through one strided view of the padded input (im2col) and does one
batched GEMM over the groups; transposed convolution does the GEMM first and scatters
(col2im) one tap at a time; pooling folds the slices with `maximum` / `add`. Their own module
(not rlx.kernels.nn's): a model without them, a transformer, imports none of this code.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from rlx.ir.ops.windows import Conv, ConvTranspose, GlobalPool, Pool, PoolKind, Window
from rlx.kernels.precision import compute_dtype, to_compute
from rlx.kernels.products import grouped_product
from rlx.kernels.registry import kernel, staged
from rlx.record import dataclass, replace  # dataclasses', cheaper to create

__all__ = ["build_conv", "conv_transpose", "build_pool", "build_global_pool"]


def _pad(x: np.ndarray, begin: Sequence[int], end: Sequence[int], value) -> np.ndarray:
    """Pad the trailing len(begin) axes with a constant (no copy when there is no padding);
    a filled buffer and one copy, where np.pad spends ~40 us setting up."""
    if not any(begin) and not any(end):
        return x
    lead = x.ndim - len(begin)
    out = np.full((*x.shape[:lead], *(n + b + e for n, b, e in zip(x.shape[lead:], begin, end))),
                  value, x.dtype)
    out[(...,) + tuple(slice(b, b + n) for b, n in zip(begin, x.shape[lead:]))] = x
    return out


def _taps(win: Window, out: Sequence[int]) -> Iterator[tuple[slice, ...]]:
    """Per kernel tap (C order, as w's trailing dims): the slices of the padded spatial axes
    holding that tap's input for each of the `out` positions."""
    for tap in np.ndindex(*win.kernel):
        yield tuple(
            slice(t * d, t * d + max((o - 1) * s + 1, 0), s)
            for t, d, s, o in zip(tap, win.dilations, win.strides, out)
        )


def _finish(y: np.ndarray, b: np.ndarray | None, node) -> np.ndarray:
    """[M, N, *spatial] -> [N, M, *spatial] + bias, contiguous, in the node's dtype."""
    if b is not None:
        y = y + b.astype(y.dtype).reshape(-1, *[1] * (y.ndim - 1))
    return np.ascontiguousarray(np.moveaxis(y, 1, 0), dtype=node.shape.dtype.numpy)


@dataclass(frozen=True)
class _Piece:
    """Output rows (first spatial axis) of a convolution and the kernel rows that meet the
    input there, as one im2col product: the other kernel rows read only padding."""

    index: tuple[slice, ...] | None  # into the window view; None = all of it
    taps: tuple[int, int]  # kernel rows [start, stop): the weights' slice
    positions: slice  # the rows' output positions, of P
    cols: tuple[int, ...]  # the view as im2col matrices: [N, g, C/g * K', P']
    chunks: tuple[slice, ...]  # blocks of groups whose im2col matrices fit in cache


@dataclass(frozen=True)
class _ConvPlan:
    """How one Conv node runs on one input shape, worked out once.

    The padded input is a fresh C-contiguous buffer (or x itself, made contiguous), so the
    window view's strides are known before the data is."""

    padded: tuple[int, ...]
    inner: tuple[Any, ...] | None  # index of x in the padded buffer; None = no padding
    view: tuple[tuple[int, ...], tuple[int, ...]]  # shape and byte strides
    pieces: tuple[_Piece, ...]  # one, or runs of rows meeting fewer kernel rows
    out: tuple[int, ...]  # [N, M, *out]
    rows: np.dtype | None = None  # an output row of the view as one element (`_row_type`)
    direct: bool = False  # x itself is the im2col matrix: a 1x1, stride-1, unpadded conv

    @property
    def taps(self) -> tuple[tuple[int, int], ...]:
        """The kernel rows of each piece: what its weight layout depends on."""
        return tuple(piece.taps for piece in self.pieces)


# im2col blocks of up to this size are multiplied while still in (L2) cache: a depthwise
# 5x5 convolution's full im2col matrix is 25x its input, and runs ~2x faster in blocks
_IM2COL_BYTES = 1 << 18
# one group's im2col matrix is made in pieces of rows of up to this size: a 3x3 convolution
# of 32 channels over 80 x 80 positions would hold 7.4 MB at once (fresh pages on a first
# run), multiplied from memory rather than from cache
_PIECE_BYTES = 1 << 20
# im2col copies of at least this many rows (each tap's input for one output row) copy each
# row as one element (`_row_type`)
_ROW_COPY_MIN = 512
# the share of (output row, kernel row) pairs reading only padding from which a
# convolution runs in pieces: a 5x5 kernel padded by 2 over 2 rows reads padding with 60%
# of them (OCR text lines), over 7 rows with 17%
_PADDING_SHARE = 0.25


def _conv_plan(op: Conv, x_shape: tuple[int, ...], w_shape: tuple[int, ...],
               itemsize: int) -> _ConvPlan:
    win = op.window(w_shape[2:], x_shape[2:])
    g = op.groups
    n, c, *sizes = x_shape
    out = win.conv_sizes(sizes)
    if min(out, default=1) < 1:
        raise ValueError(f"input of spatial size {tuple(sizes)} is too small for the kernel "
                         f"{tuple(win.kernel)} (output size {tuple(out)})")
    padded = (n, c, *(s + b + e for s, b, e in zip(sizes, win.begin, win.end)))
    inner = None
    if any(win.begin) or any(win.end):
        inner = (..., *(slice(b, b + s) for b, s in zip(win.begin, sizes)))
    elems = [math.prod(padded[a + 1:]) for a in range(len(padded))]  # C-order strides
    spatial = elems[2:]
    # [N, g, C/g, *kernel, *out]: taps then positions, so that for each group the
    # reshape to [C/g * K, P] is the im2col matrix
    shape = (n, g, c // g, *win.kernel, *out)
    strides = (elems[0], elems[1] * (c // g), elems[1],
               *(d * e for d, e in zip(win.dilations, spatial)),
               *(s * e for s, e in zip(win.strides, spatial)))
    strides = tuple(s * itemsize for s in strides)
    rest_kernel, rest_out = math.prod(win.kernel[1:]), math.prod(out[1:])
    runs = _row_runs(win, sizes[0], out[0])
    useful = sum((t1 - t0) * (r1 - r0) for (t0, t1), (r0, r1) in runs)
    if useful > (1 - _PADDING_SHARE) * win.kernel[0] * out[0]:
        runs = [((0, win.kernel[0]), (0, out[0]))]
    # a 1x1, stride-1, unpadded conv multiplies the input itself: nothing to hold in pieces
    copies = inner is not None or any(k != 1 for k in win.kernel) or any(
        s != 1 for s in win.strides)
    pieces = []
    for (t0, t1), (r0, r1) in runs:
        k_cols = c // g * (t1 - t0) * rest_kernel
        rows = max(_PIECE_BYTES // max(n * k_cols * rest_out * itemsize, 1), 1) if copies \
            else r1 - r0
        for q0 in range(r0, r1, rows):
            q1 = min(q0 + rows, r1)
            index = None if (t0, t1, q0, q1) == (0, win.kernel[0], 0, out[0]) else (
                (slice(None),) * 3 + (slice(t0, t1),) + (slice(None),) * (len(sizes) - 1)
                + (slice(q0, q1),))
            cols = (n, g, k_cols, (q1 - q0) * rest_out)
            step = max(_IM2COL_BYTES // max(n * k_cols * cols[3] * itemsize, 1), 1)
            chunks = tuple(slice(i, min(i + step, g)) for i in range(0, g, step))
            pieces.append(_Piece(index, (t0, t1), slice(q0 * rest_out, q1 * rest_out), cols,
                                 chunks))
    row_type = _row_type(shape, win.strides, itemsize) if copies else None
    return _ConvPlan(padded, inner, (shape, strides), tuple(pieces), (n, w_shape[0], *out),
                     row_type, not copies)


def _row_type(shape: tuple[int, ...], strides: Sequence[int], itemsize: int) -> np.dtype | None:
    """The window view's last axis (one output row's positions for one tap, contiguous at
    stride 1) as one opaque element, when the im2col copy has `_ROW_COPY_MIN` rows or more
    in two or more spatial dims (in one, pieces slice that axis). NumPy copies a strided
    float view with a loop step per row costing ~5 ns on top of the data; whole rows as
    elements cost about half that (thread CPU time, interleaved; 3x3 on 16 x 28 x 28:
    25.2 -> 11.7 us; 64 x 14 x 14: 40.7 -> 23.0 us; 8 x 112 x 112: 99.8 -> 86.1 us; 4 x 48 x
    192: 32.7 -> 32.3 us). Below that its own setup costs more than it saves (90 rows: 1.7
    -> 2.8 us)."""
    if len(strides) < 2 or strides[-1] != 1 or math.prod(shape[:-1]) < _ROW_COPY_MIN:
        return None
    return np.dtype((np.void, shape[-1] * itemsize))


def _row_runs(win: Window, size: int, out: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Runs of output rows (the first spatial axis) that meet the input with the same kernel
    rows: ((first tap, stop), (first row, stop)); (0, 0) taps where a row meets only padding.
    Only the rows at the borders are looked at one by one: those between meet it with all."""
    k, s, d, b = win.kernel[0], win.strides[0], win.dilations[0], win.begin[0]

    def taps(o: int) -> tuple[int, int]:  # a with 0 <= o * s + a * d - b < size
        lo, hi = max(0, -((o * s - b) // d)), min(k, (size - 1 + b - o * s) // d + 1)
        return (lo, hi) if lo < hi else (0, 0)

    first = min(out, -(-b // s))  # rows before it meet the begin padding
    last = min(out, max(first, (size - 1 + b - (k - 1) * d) // s + 1))  # from it, the end's
    keyed = [(taps(o), o) for o in range(first)] + [(taps(o), o) for o in range(last, out)]
    if first < last:
        keyed.insert(first, ((0, k), first))
    runs: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for i, (key, o) in enumerate(keyed):
        stop = keyed[i + 1][1] if i + 1 < len(keyed) else out
        if runs and runs[-1][0] == key:
            runs[-1] = (key, (runs[-1][1][0], stop))
        else:
            runs.append((key, (o, stop)))
    return runs


@dataclass(frozen=True)
class _ChannelsLastPlan:
    """How a depthwise Conv with many channels runs on one input shape: x is copied, padded,
    into a channels-last buffer [N, *padded, C], and one einsum over the window view
    [N, *out, *kernel, C] sums the taps, its innermost loop running along the contiguous
    channels. im2col instead makes one matrix-vector product per channel, whose cost grows
    with the channel count, and this one einsum step per output position: with 64 channels
    or more and at most two positions per channel this is faster (ppocr-cls: 25% off the
    run; [256, 14, 14] 5x5: 0.58x im2col's time), with more positions im2col is (lcnet's
    [64, 56, 56] 3x3: 0.60x this path's time; thread CPU time, interleaved). An im2col
    plan in pieces (kernel rows that read only padding left out) stays im2col: ppocr-cls's
    [200, 2, 96] 5x5 padded by 2 takes 0.58x this path's time that way."""

    padded: tuple[int, ...]
    inner: tuple[slice, ...]  # where x, channels last, lands in the padded buffer
    view: tuple[tuple[int, ...], tuple[int, ...]]  # shape and byte strides
    subscripts: str  # window view, weights [*kernel, C] -> [N, C, *out]


_CHANNELS_LAST_MIN = 64
_CHANNELS_LAST_POSITIONS = 2  # output positions per channel, at most


def _is_wide_depthwise(op: Conv, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> bool:
    """One filter per input channel (w [C, 1, *kernel], groups C), C >= 64, and at most
    `_CHANNELS_LAST_POSITIONS` output positions per channel."""
    if not (op.groups == w_shape[0] >= _CHANNELS_LAST_MIN and w_shape[1] == 1):
        return False
    positions = math.prod(op.window(w_shape[2:], x_shape[2:]).conv_sizes(x_shape[2:]))
    return positions <= _CHANNELS_LAST_POSITIONS * w_shape[0]


def _channels_last_plan(op: Conv, x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                        itemsize: int) -> _ChannelsLastPlan:
    win = op.window(w_shape[2:], x_shape[2:])
    n, c, *sizes = x_shape
    out = win.conv_sizes(sizes)
    if min(out, default=1) < 1:
        raise ValueError(f"input of spatial size {tuple(sizes)} is too small for the kernel "
                         f"{tuple(win.kernel)} (output size {tuple(out)})")
    padded = (n, *(s + b + e for s, b, e in zip(sizes, win.begin, win.end)), c)
    elems = [math.prod(padded[a + 1:]) for a in range(len(padded))]  # C-order strides
    spatial = elems[1:-1]
    shape = (n, *out, *win.kernel, c)
    strides = (elems[0], *(s * e for s, e in zip(win.strides, spatial)),
               *(d * e for d, e in zip(win.dilations, spatial)), 1)
    rank = len(sizes)
    positions, taps = "pqrstu"[:rank], "ijklmo"[:rank]  # n: batch, c: channel
    return _ChannelsLastPlan(
        padded, (slice(None), *(slice(b, b + s) for b, s in zip(win.begin, sizes)), slice(None)),
        (shape, tuple(s * itemsize for s in strides)),
        f"n{positions}{taps}c,{taps}c->nc{positions}")


@dataclass(frozen=True)
class _BandedPlan:
    """How a depthwise 2-D Conv over narrow rows runs on one input shape: x is copied into a
    buffer padded along its rows only, the input rows that a block of `rows[0]` output rows
    reads are one contiguous slice of the buffer (a view, no copy), and one batched GEMM per
    channel multiplies these windows by a banded [window, rows[0] * W_out] matrix that holds
    the kernel's columns, the strides, dilation and padding (its zeros). That does W / kw
    times the multiply-adds of a direct convolution, and is still faster while W <=
    `_BANDED_WIDTH_PER_TAP` * kw (thread CPU time, interleaved): a keyword spotter's 64 x 25
    x 5 3x3 took 105 us by im2col (a GEMM of 9 rows per channel), 44 us by the channels-last
    einsum, 23 us this way; 64 x 12 x 12: 55 -> 23 us; 128 x 28 x 28: 329 -> 319 us; 32 x
    40 x 40: 173 -> 188 us. It also beats the channels-last path from
    `_BANDED_MIN_POSITIONS` output positions per channel (256 x 14 x 14 5x5: 507 -> 201 us;
    256 x 7 x 7 3x3: 48 -> 40 us), not below (512 x 4 x 4 3x3: 29 -> 39 us, one small GEMM
    per channel). A block of several output rows (`_band_rows`) makes fewer, wider GEMMs
    and windows: the last block's rows past the output read zeros and are cut off."""

    padded: tuple[int, ...]  # [N, C, rows + padding (+ what the last block reads past), W]
    inner: tuple[slice, ...]  # where x lands in the padded buffer
    view: tuple[tuple[int, ...], tuple[int, ...]]  # [N, C, blocks, window] and byte strides
    columns: tuple[int, int, int, int, int]  # W, W_out, and along W: stride, dilation, begin
    rows: tuple[int, int]  # output rows a block makes, and the stride along the rows
    out: tuple[int, ...]  # [N, C, out rows, W_out]
    windows: np.dtype | None = None  # one block's window as one element, if copied so


_BANDED_WIDTH_PER_TAP = 8
_BANDED_MIN_POSITIONS = 32
# banded windows (blocks of output rows) copied as opaque elements from this many on: 32 x
# 12 x 8 3x3 in 192 windows 7.8 -> 7.2 us a conv, 32 x 25 x 5 in 288 10.4 -> 9.9; 16 x 25 x
# 5 in 144 6.9 -> 7.1, 8 x 25 x 5 in 72 5.1 -> 5.6 (thread CPU time)
_WINDOW_COPY_MIN = 192
# a block of output rows spans up to this many output columns: BLAS's small GEMMs take
# about as long for 16 columns as for 5 (64 GEMMs [25, 15] @ [15, 5] 10.9 us, [9, 25] @
# [25, 15] 8.4 us), not for 20 or 24 (64 x 12 x 8 3x3 by blocks of 2 rows 13.8 -> 12.5 us a
# conv, of 3 rows 19.8; thread CPU time, interleaved)
_BAND_COLUMNS = 16


def _is_narrow_depthwise(op: Conv, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> bool:
    """One filter per channel (w [C, 1, kh, kw], groups C) over rows of at most
    `_BANDED_WIDTH_PER_TAP` * kw values, kernel rows not dilated (their slices touch)."""
    return (len(w_shape) == 4 and op.groups == w_shape[0] == x_shape[1] and w_shape[1] == 1
            and (op.dilations or (1, 1))[0] == 1
            and x_shape[3] <= _BANDED_WIDTH_PER_TAP * w_shape[3])


def _band_rows(out_rows: int, out_width: int, stride: int) -> int:
    """Output rows a band makes at once: as many as fit `_BAND_COLUMNS` columns, at a row
    stride of 1. Past it each row widens the window by `stride` input rows, and blocks lost
    (64 x 25 x 5 3x3 stride 2: 13.4 us a conv by rows, 14.7 by blocks of 2; 64 x 25 x 5 3x3
    stride 1: 18.8 -> 15.7 us by blocks of 3, 96 x 16 x 8 5x5: 37.9 -> 25.0 by 2, 32 x 20
    x 6: 10.7 -> 9.1 by 2, 256 x 7 x 7: 33.7 -> 34.3 by 2)."""
    if stride != 1:
        return 1
    return max(1, min(out_rows, _BAND_COLUMNS // max(out_width, 1)))


def _banded_plan(op: Conv, x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                 itemsize: int) -> _BandedPlan:
    win = op.window(w_shape[2:], x_shape[2:])
    n, c, rows, width = x_shape
    out_rows, out_width = win.conv_sizes(x_shape[2:])
    step, kh = win.strides[0], win.kernel[0]
    per = _band_rows(out_rows, out_width, step)
    blocks = -(-out_rows // per)
    span = (per - 1) * step + kh  # input rows a block reads
    padded = (n, c, max(rows + win.begin[0] + win.end[0], (blocks - 1) * per * step + span),
              width)
    plane = padded[2] * width
    strides = (c * plane, plane, per * step * width, 1)
    windows = None if n * c * blocks < _WINDOW_COPY_MIN else np.dtype(
        (np.void, span * width * itemsize))
    return _BandedPlan(
        padded, (slice(None), slice(None), slice(win.begin[0], win.begin[0] + rows)),
        ((n, c, blocks, span * width), tuple(s * itemsize for s in strides)),
        (width, out_width, win.strides[1], win.dilations[1], win.begin[1]), (per, step),
        (n, c, out_rows, out_width), windows)


def _banded_weights(w: np.ndarray, columns: tuple[int, int, int, int, int],
                    rows: tuple[int, int]) -> np.ndarray:
    """w [C, 1, kh, kw] as [C, window, R * W_out] for blocks of R output rows: entry (input
    row r * step + i, input column x; output row r, column o) is w[:, 0, i, j] where x = o *
    stride + j * dilation - begin, zero elsewhere."""
    width, out_width, stride, dilation, begin = columns
    per, step = rows
    c, _, kh, kw = w.shape
    span = (per - 1) * step + kh
    bands = np.zeros((c, span, width, per, out_width), w.dtype)
    out = np.arange(out_width)
    for j in range(kw):
        source = out * stride + j * dilation - begin
        inside = (source >= 0) & (source < width)
        for r in range(per):
            bands[:, r * step:r * step + kh, source[inside], r, out[inside]] = \
                w[:, 0, :, j, None]
    return bands.reshape(c, span * width, per * out_width)


def _banded_conv(bands: np.ndarray, plan: _BandedPlan, dt: np.dtype,
                 x: np.ndarray) -> np.ndarray:
    """The windows overlap (a row stride below their length), which BLAS cannot read:
    matmul copies them out. From `_WINDOW_COPY_MIN` windows on they are copied first, each
    one opaque element: a loop step per window where NumPy's float copy takes one per row
    of W values (64 x 25 x 5 3x3: 21.9 -> 18.9 us a conv, 64 x 12 x 8: 16.7 -> 14.3 us, 128
    x 28 x 28: 302 -> 237 us; 8 x 5 x 5, 40 windows: 3.8 -> 5.8 us; thread CPU time,
    interleaved; the same bits)."""
    xp = np.zeros(plan.padded, dt)
    xp[plan.inner] = x
    shape, strides = plan.view
    if plan.windows is None:
        y = np.matmul(np.ndarray(shape, dt, xp, 0, strides), bands)
    else:
        windows = np.ndarray(shape[:-1], plan.windows, xp, 0, strides[:-1]).copy()
        y = np.matmul(windows.view(dt).reshape(shape), bands)
    n, c, out_rows, out_width = plan.out
    y = y.reshape(n, c, shape[2] * plan.rows[0], out_width)
    return y if y.shape[2] == out_rows else y[:, :, :out_rows].copy()


def _conv_weights(w: np.ndarray, b: np.ndarray | None, groups: int, dt: np.dtype,
                  plan: _ConvPlan | _ChannelsLastPlan | _BandedPlan):
    """The weights in the layout their path reads, channels last [*kernel, M] or, per piece
    of an im2col plan, GEMM [g, M/g, C/g * K'] (None for rows that meet only padding), and
    the bias shaped to add to [N, M, *out], in the compute dtype."""
    m = w.shape[0]
    bias = None if b is None else b.astype(dt).reshape(m, *[1] * (w.ndim - 2))
    w = w.astype(dt, copy=False)
    if isinstance(plan, _ChannelsLastPlan):
        return np.ascontiguousarray(np.moveaxis(w[:, 0], 0, -1)), bias
    if isinstance(plan, _BandedPlan):
        return _banded_weights(w, plan.columns, plan.rows), bias
    layouts = {taps: None if taps[0] == taps[1] else np.ascontiguousarray(
        w[:, :, slice(*taps)]).reshape(groups, m // groups, -1) for taps in set(plan.taps)}
    return tuple(layouts[taps] for taps in plan.taps), bias


@staged(Conv)
def build_conv(node, compile):
    """Conv as pad + one strided window view + batched GEMMs over blocks of groups
    (im2col; depthwise too, where it beats a multiply-add per tap); a 1x1 unpadded
    stride-1 convolution multiplies the input itself, without a copy. Output rows that meet
    the input with fewer kernel rows than the rest (the others read only padding) run as
    their own pieces, when that leaves out a quarter of the products or more, and a group's
    im2col matrix is made up to `_PIECE_BYTES` of rows at a time. A depthwise
    Conv of 64 channels or more at few positions per channel runs channels-last instead
    (`_ChannelsLastPlan`), another over narrow rows as banded GEMMs (`_BandedPlan`).

    Plans are cached per input shape and the weight layouts per weight array (a constant
    is the same array every run), and the convolution they make is bound to the last
    call's x shape, w and b. The caches only ever receive complete entries, so concurrent
    runs are safe and at worst redo the work."""
    return _ConvStep(node.op, node.shape.dtype.numpy).step


_NO_CALL: tuple = ((), None, None, None)
_NO_LAYOUT: tuple = (None, None, (), None, None)


class _ConvStep:
    """One Conv node's caches, in slots, and its `step` (with its bound method ~150 bytes a
    node; a closure over a dict and two lists was ~670): the plans per (x, w) shape, the
    dict made on the first call; the weight layout of the last weights (w, b, what the
    layout depends on, layout, bias); the convolution bound to the last call's x shape, w
    and b: a run of a static-shape graph finds it with one comparison (a 1x1 conv of
    64 x 125: 12.4 -> 11.0 us a call, of which ~10.5 the GEMM). Caches are replaced whole
    or given complete entries, never edited in part."""

    __slots__ = ("op", "dt", "out_dtype", "plans", "layout", "last")

    def __init__(self, op: Conv, out_dtype: np.dtype):
        self.op, self.out_dtype, self.dt = op, out_dtype, compute_dtype(out_dtype)
        self.plans: dict[tuple, tuple[_ConvPlan | _ChannelsLastPlan | _BandedPlan, Any]] \
            | None = None
        self.layout, self.last = _NO_LAYOUT, _NO_CALL

    def step(self, x, w, b=None):
        shape, w0, b0, run = self.last
        if w0 is w and b0 is b and shape == x.shape:
            return run(x)
        key = (x.shape, w.shape)
        plans = self.plans
        if plans is None:
            plans = self.plans = {}
        found = plans.get(key)
        if found is None:
            found = plans[key] = _chosen_plan(self.op, x.shape, w.shape, self.dt.itemsize)
        # the layout depends on x's shape too: another input size may need another path
        # or other pieces
        plan, layout_key = found
        cached = self.layout
        if cached[0] is not w or cached[1] is not b or cached[2] != layout_key:
            cached = self.layout = (w, b, layout_key,
                                    *_conv_weights(w, b, self.op.groups, self.dt, plan))
        run = _bound_conv(plan, cached[3], cached[4], self.dt, self.out_dtype)
        self.last = (x.shape, w, b, run)
        return run(x)


def _bound_conv(plan: _ConvPlan | _ChannelsLastPlan | _BandedPlan, layout: Any,
                bias: np.ndarray | None, dt: np.dtype, out_dtype: np.dtype
                ) -> Callable[[np.ndarray], np.ndarray]:
    """x -> the convolution by `plan` with the weights `layout` and `bias`, in `out_dtype`."""
    if isinstance(plan, _ChannelsLastPlan):
        conv = functools.partial(_channels_last_conv, layout, plan, dt)
    elif isinstance(plan, _BandedPlan):
        conv = functools.partial(_banded_conv, layout, plan, dt)
    elif plan.direct and layout[0] is not None and len(plan.pieces[0].chunks) == 1:
        conv = functools.partial(_direct_conv, layout[0], plan.pieces[0].cols, plan.out, dt)
    else:
        conv = functools.partial(_im2col_conv, layout, plan, dt)
    if bias is None and out_dtype == dt:
        return conv
    return functools.partial(_biased, conv, bias, out_dtype)


def _biased(conv: Callable[[np.ndarray], np.ndarray], bias: np.ndarray | None,
            out_dtype: np.dtype, x: np.ndarray) -> np.ndarray:
    y = conv(x)
    if bias is not None:
        y += bias
    return y.astype(out_dtype, copy=False)


def _chosen_plan(op: Conv, x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                 itemsize: int) -> tuple[_ConvPlan | _ChannelsLastPlan | _BandedPlan, Any]:
    """The plan of a Conv on one input shape and what its weight layout depends on."""
    im2col = _conv_plan(op, x_shape, w_shape, itemsize)
    narrow = _is_narrow_depthwise(op, x_shape, w_shape)
    if len(im2col.pieces) == 1 and _is_wide_depthwise(op, x_shape, w_shape) and not (
            narrow and math.prod(im2col.out[2:]) >= _BANDED_MIN_POSITIONS):
        return _channels_last_plan(op, x_shape, w_shape, itemsize), None
    if narrow:
        banded = _banded_plan(op, x_shape, w_shape, itemsize)
        return banded, (banded.columns, banded.rows)
    return im2col, im2col.taps


def _im2col_conv(layouts: tuple, plan: _ConvPlan, dt: np.dtype, x: np.ndarray) -> np.ndarray:
    if plan.inner is None:
        xp = np.ascontiguousarray(x, dtype=dt)
    else:
        xp = np.zeros(plan.padded, dt)
        xp[plan.inner] = x
    # the window view, built directly: as_strided costs ~10x more per call
    view = np.ndarray(plan.view[0], dt, xp, 0, plan.view[1])
    rows = None if plan.rows is None else np.ndarray(
        plan.view[0][:-1], plan.rows, xp, 0, plan.view[1][:-1])
    return _im2col_gemm(view, rows, layouts, plan).reshape(plan.out)


def _direct_conv(layout: np.ndarray, cols: tuple[int, ...], out: tuple[int, ...],
                 dt: np.dtype, x: np.ndarray) -> np.ndarray:
    """A 1x1, stride-1, unpadded conv in one block of groups: [g, M/g, C/g] @ x as
    [N, g, C/g, P], without building the window view. One image of one group with a small
    output is one `ndarray.dot` (`rlx.kernels.products.grouped_product`; 64 x 64 @ 64 x 125:
    10.9 -> 10.5 us)."""
    return grouped_product(layout, x.astype(dt, copy=False).reshape(cols)).reshape(out)


def _channels_last_conv(weights: np.ndarray, plan: _ChannelsLastPlan, dt: np.dtype,
                        x: np.ndarray) -> np.ndarray:
    xp = np.zeros(plan.padded, dt)
    xp[plan.inner] = np.moveaxis(x, 1, -1)
    view = np.ndarray(plan.view[0], dt, xp, 0, plan.view[1])
    return np.ascontiguousarray(np.einsum(plan.subscripts, view, weights))


@kernel(ConvTranspose)
def conv_transpose(node, x, w, b=None):
    op = node.op
    win = op.window(w.shape[2:])
    g = op.groups
    n, c, *sizes = x.shape
    m = w.shape[1] * g
    taps, positions = math.prod(win.kernel), math.prod(sizes)
    xg = np.moveaxis(to_compute(x).reshape(n, g, c // g, positions), 0, 2)  # [g, C/g, N, P]
    wg = w.astype(xg.dtype, copy=False).reshape(g, c // g, -1).transpose(0, 2, 1)
    cols = np.matmul(wg, xg.reshape(g, c // g, n * positions)).reshape(m, taps, n, *sizes)
    # col2im: scatter-add each tap's contribution into the uncropped output
    extra = op.resolved_output_padding(len(sizes))
    full = [(i - 1) * s + e + p for i, s, e, p in zip(sizes, win.strides, win.extent, extra)]
    y = np.zeros((m, n, *full), cols.dtype)
    for k, sl in enumerate(_taps(win, sizes)):
        y[(...,) + sl] += cols[:, k]
    crop = tuple(slice(bg, f - en) for bg, f, en in zip(win.begin, full, win.end))
    return _finish(y[(...,) + crop], b, node)


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _fold(parts: Iterator[np.ndarray], ufunc: np.ufunc, dtype: np.dtype) -> np.ndarray:
    """Reduce tap slices elementwise into a fresh array, in place after the first."""
    acc = np.array(next(parts), dtype=dtype)
    for part in parts:
        ufunc(acc, part, out=acc)
    return acc


def _separable_max(pads: tuple | None, axes: tuple, x: np.ndarray) -> np.ndarray:
    """Max over a window as a max along one axis at a time (the max over a box is the max
    of the maxes of its rows): sum(kernel) passes instead of prod(kernel), 10 instead of 25
    for a 5x5 window (YOLO's SPPF pools 5x5 three times). Outer axes first: their passes
    read whole contiguous rows, and leave the strided passes along the last axis fewer rows
    (3x3 stride 2 on [64, 112, 112]: 0.65x the last axis first; thread CPU time).
    `pads`, `axes`: `_max_plan` of the window over x's shape."""
    y = x if pads is None else _pad(x, pads[0], pads[1], _lowest(x.dtype))
    for first, second, rest, partial, empty in axes:
        if second is not None:
            acc = np.maximum(y[first], y[second])
        elif first is not None:
            acc = np.array(y[first])
        else:  # no tap reaches every output (ceil mode's last window, a short input)
            acc = np.full(empty, _lowest(y.dtype), y.dtype)
        for taken in rest:
            np.maximum(acc, y[taken], out=acc)
        for into, taken in partial:
            part = acc[into]
            np.maximum(part, y[taken], out=part)
        y = acc
    return y


def _max_plan(win: Window, shape: tuple[int, ...], out: tuple[int, ...]):
    """Padding (None where there is none), and per axis of x's `shape` the input indices of
    the taps reaching every output (the first, the second and the rest: None where there
    are fewer), the (output, input) indices of those reaching only some (each a whole
    index: the batch, channel and earlier axes taken whole) and the shape of the axis's
    result. Tap t gives output q the input at q * s + t * d - begin, where that lies inside
    the (padded) input; padding outside it is never read. Axes of stride 1 are padded
    first, in one pass no bigger than the output, so that every tap there updates the whole
    array (updates of a part run ~2x slower: numpy's loops want contiguous operands). Along
    a larger stride, padding would cost a pass over an input s times the output, so it is
    left out (3x3 stride 2 pad 1 on [64, 112, 112]: 0.57x the time of padding first; thread
    CPU time)."""
    pad_begin, pad_end, padded = [], [], []
    wholes: list[tuple] = []
    partials: list[tuple] = []
    for n, o, k, s, d, b, e in zip(shape[2:], out, win.kernel, win.strides, win.dilations,
                                   win.begin, win.extent):
        if s == 1:
            after = max(0, o - 1 + e - b - n)
            pad_begin.append(b)
            pad_end.append(after)
            n, b = n + b + after, 0
        else:
            pad_begin.append(0)
            pad_end.append(0)
        padded.append(n)
        whole, partial = [], []
        before = (slice(None),) * (2 + len(wholes))
        for t in range(k):
            first = max(0, -((t * d - b) // s))  # the first output whose input is inside
            stop = min(o, (n - 1 - t * d + b) // s + 1)
            if first < stop:
                start = first * s + t * d - b
                taken = slice(start, start + (stop - first - 1) * s + 1, s)
                if (first, stop) == (0, o):
                    whole.append(before + (taken,))
                else:
                    partial.append((before + (slice(first, stop),), before + (taken,)))
        wholes.append(tuple(whole))
        partials.append(tuple(partial))
    pads = (tuple(pad_begin), tuple(pad_end)) if any(pad_begin) or any(pad_end) else None
    axes = tuple(
        (*(whole + (None, None))[:2], whole[2:], partial,
         (*shape[:2], *out[:a + 1], *padded[a + 1:]))
        for a, (whole, partial) in enumerate(zip(wholes, partials)))
    return pads, axes


def _window_counts(win: Window, sizes: Sequence[int], out: Sequence[int], include_pad: bool):
    """Elements each average window divides by, [*out]: per axis, the taps landing on the
    input (or on the input and its explicit pads), multiplied across axes."""
    count = np.ones((), np.int64)
    for k, s, d, b, e, n, o in zip(win.kernel, win.strides, win.dilations, win.begin,
                                   win.end, sizes, out):
        pos = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d
        lo, hi = (0, b + n + e) if include_pad else (b, b + n)
        count = count[..., None] * ((pos >= lo) & (pos < hi)).sum(axis=1)
    return count


def _pool_plan(op: Pool, shape: tuple[int, ...]) -> tuple:
    """(window, output sizes, end padding, taps, divisors) for inputs of `shape`: the work
    a run would otherwise redo per call. Max pooling's taps are its `_max_plan`; an
    average's are the tap slices, with its end padding and divisors."""
    sizes = shape[2:]
    win = op.window(op.kernel, sizes)
    out = win.pool_sizes(sizes, op.ceil_mode)
    if not all(out):
        return win, out, (), (), None
    if op.kind is PoolKind.MAX:
        return win, out, (), _max_plan(win, shape, out), None
    # in ceil mode the last window may run past the end padding: pad that overhang too
    end = tuple(max(e, (o - 1) * s + ext - n - b) for o, s, ext, n, b, e in
                zip(out, win.strides, win.extent, sizes, win.begin, win.end))
    # outside ceil mode, a window hanging past a short input counts its overhang as
    # padding (onnxruntime: a 2x2 average of a 1x1 image with count_include_pad is x / 4)
    counted = win if op.ceil_mode else replace(win, end=end)
    counts = _window_counts(counted, sizes, out, op.count_include_pad)
    return win, out, end, tuple(_taps(win, out)), counts


@staged(Pool, shared=True)
def build_pool(node, compile):
    """Pooling with its geometry planned once per input shape, bound to it."""
    op = node.op
    runs: dict[tuple, Callable[[np.ndarray], np.ndarray]] = {}

    def step(x):
        run = runs.get(x.shape)
        if run is None:
            run = runs[x.shape] = _bound_pool(op, x.shape)
        return run(x)

    return step


def _bound_pool(op: Pool, shape: tuple[int, ...]) -> Callable[[np.ndarray], np.ndarray]:
    """x of `shape` -> its pooling, with the geometry worked out here."""
    win, out, end, taps, counts = _pool_plan(op, shape)
    if not taps:  # an empty output (every kernel has taps)
        return lambda x: np.zeros((*shape[:2], *out), x.dtype)
    if op.kind is PoolKind.MAX:
        return functools.partial(_separable_max, *taps)

    def average(x: np.ndarray) -> np.ndarray:
        xp = _pad(to_compute(x), win.begin, end, 0)
        total = _fold((xp[(...,) + sl] for sl in taps), np.add, xp.dtype)
        total /= counts
        return total.astype(x.dtype, copy=False)

    return average


def _im2col_gemm(view: np.ndarray, rows: np.ndarray | None, layouts: tuple,
                 plan: _ConvPlan) -> np.ndarray:
    """[g, M/g, C/g * K] @ im2col(view) -> [N, g, M/g, P] ([M, P] for one image of one
    group: the caller reshapes), piece by piece, one block of groups at a time. The
    reshape of the view is the im2col copy (none for a 1x1, stride-1, unpadded conv);
    `rows`, the view with its rows as elements, copies them whole."""
    pieces, n = plan.pieces, plan.out[0]
    first, g = pieces[0], pieces[0].cols[1]
    if len(pieces) == 1 and len(first.chunks) == 1 and layouts[0] is not None:
        return grouped_product(layouts[0], _columns(view, rows, first.index, first.cols))
    y = np.empty((n, g, plan.out[1] // g, math.prod(plan.out[2:])), view.dtype)
    for piece, wk in zip(pieces, layouts):
        out = y[..., piece.positions]
        if wk is None:
            out[...] = 0
            continue
        k, p = piece.cols[2:]
        index = piece.index or (slice(None),) * 2
        for block in piece.chunks:
            cols = _columns(view, rows, (index[0], block, *index[2:]),
                            (n, block.stop - block.start, k, p))
            np.matmul(wk[block], cols, out=out[:, block])
    return y


def _columns(view: np.ndarray, rows: np.ndarray | None, index: tuple | None,
             shape: tuple[int, ...]) -> np.ndarray:
    """The im2col matrices of `view[index]`, as `shape`: a copy, whole rows at a time when
    `rows` is given."""
    if rows is None:
        return (view if index is None else view[index]).reshape(shape)
    part = rows if index is None else rows[index]
    return part.copy().view(view.dtype).reshape(shape)  # one call: ~0.6 us under empty + copyto


@staged(GlobalPool, shared=True)
def build_global_pool(node, compile):
    """One reduction over the flattened spatial axes, its geometry bound per input shape.
    An average is a matrix-vector product with a vector of 1/count (BLAS): ~4x faster than
    numpy's row reduction on [C, H*W], whose per-row cost dominates at the sizes CNNs
    pool; `ndarray.dot` of the rows as one matrix calls it with less setup than a batched
    `matmul` (64 x 125: 2.7 -> 1.5 us a pool, thread CPU time)."""
    dtype = node.shape.dtype.numpy
    is_max = node.op.kind is PoolKind.MAX
    runs: dict[tuple[int, ...], Callable[[np.ndarray], np.ndarray]] = {}

    def step(x):
        run = runs.get(x.shape)
        if run is None:
            run = runs[x.shape] = _bound_global_pool(is_max, x.shape, dtype)
        return run(x)

    return step


def _bound_global_pool(is_max: bool, shape: tuple[int, ...],
                       dtype: np.dtype) -> Callable[[np.ndarray], np.ndarray]:
    """x of `shape` -> its global max or average, in `dtype`."""
    n, c, *spatial = shape
    count = math.prod(spatial)
    out = (n, c, *[1] * len(spatial))
    if is_max:
        return lambda x: np.maximum.reduce(x.reshape(n, c, count), axis=2).reshape(out)
    if count == 0:
        return lambda x: np.full(out, np.nan, dtype)  # the mean of nothing
    dt = compute_dtype(dtype)
    mean = np.full(count, 1 / count, dt)

    def average(x: np.ndarray) -> np.ndarray:
        y = x.reshape(n * c, count).astype(dt, copy=False).dot(mean)
        return y.astype(dtype, copy=False).reshape(out)

    return average
