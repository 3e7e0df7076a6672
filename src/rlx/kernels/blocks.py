"""Block kernels (ONNX semantics), numpy only: those of `rlx.ir.ops.blocks`, imported only
for a graph that has one of them (issue 35)."""

from __future__ import annotations

import numpy as np

from rlx.ir.ops.blocks import DepthToSpace, DepthToSpaceMode, Pad, PadMode, SpaceToDepth, Tile
from rlx.kernels.registry import kernel, staged
from rlx.kernels.shaping import given_ints, per_shape

__all__ = ["build_pad", "tile", "depth_to_space", "space_to_depth"]


@staged(Pad, shared=True)
def build_pad(node, compile):
    """Pad with its plan worked out once per input shape (`_pad_plan`): np.pad itself
    spends ~40 us per call on setup, more than a small tensor's copy."""
    op = node.op
    plan = per_shape(op.pads is not None, lambda shape, pads=None: _pad_plan(
        op.mode, shape, given_ints(op.pads, pads)))

    def step(x, pads=None, value=None):
        crop, inner_or_takes, shape = plan(x.shape, pads)
        x = x[crop]
        if op.mode is not PadMode.CONSTANT:
            for axis, index in inner_or_takes:
                x = np.take(x, index, axis=axis)
            return x
        fill = op.value if value is None else value
        out = np.full(shape, np.asarray(fill).astype(x.dtype), x.dtype)
        out[inner_or_takes] = x
        return out

    return step


def _pad_plan(mode: PadMode, shape: tuple[int, ...], pads: tuple[int, ...]):
    """(crop of x, constant mode: x's place in the output / other modes: per padded axis
    the source index of each output position (np.pad of an arange, so the edge rules are
    numpy's, which names them as ONNX does), output shape). Negative pads crop first, so
    reflect/wrap see the cropped data (as ONNX Runtime does)."""
    rank = len(shape)
    begins, ends = pads[:rank], pads[rank:]
    crop = tuple(slice(max(-b, 0), n - max(-e, 0)) for n, b, e in zip(shape, begins, ends))
    sizes = [len(range(n)[c]) for n, c in zip(shape, crop)]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
    out = tuple(n + b + e for n, (b, e) in zip(sizes, widths))
    for axis, (n, w) in enumerate(zip(sizes, widths)):
        if mode is PadMode.REFLECT and max(w) >= n > 0 or n == 0 and any(w) \
                and mode is not PadMode.CONSTANT:
            raise ValueError(f"{mode.value} pads {w} of axis {axis} need more than its {n} "
                             "element(s)")
    if mode is PadMode.CONSTANT:
        return crop, tuple(slice(b, b + n) for n, (b, _) in zip(sizes, widths)), out
    takes = [(axis, np.pad(np.arange(n), w, mode=mode.value))
             for axis, (n, w) in enumerate(zip(sizes, widths)) if w != (0, 0)]
    return crop, takes, out


@kernel(Tile)
def tile(node, x, repeats=None):
    return np.tile(x, given_ints(node.op.repeats, repeats))


# -- depth and space on images ----------------------------------------------------------------
@kernel(DepthToSpace)
def depth_to_space(node, x):
    n, c, h, w = x.shape
    b = node.op.blocksize
    if node.op.mode is DepthToSpaceMode.DCR:
        blocks = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        blocks = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return blocks.reshape(n, c // (b * b), h * b, w * b)


@kernel(SpaceToDepth)
def space_to_depth(node, x):
    n, c, h, w = x.shape
    b = node.op.blocksize
    blocks = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return blocks.reshape(n, c * b * b, h // b, w // b)
