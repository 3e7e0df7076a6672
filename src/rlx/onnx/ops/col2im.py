"""Col2Im: sum sliding blocks back into an image, with shapes known only at run time.

Every input element (channel c, block offset k, block location l) lands on one padded image
position p = l * stride + k * dilation per axis; a ScatterElements with add reduction sums
them into a flat zero image, which is reshaped and cropped of its pads. The index arithmetic
is IR arithmetic on image_shape and block_shape, so they may be run-time inputs.
"""

from __future__ import annotations

import numpy as np

from rlx.ir import (
    BinaryOp,
    Concat,
    DType,
    Range,
    ReduceOp,
    ScatterElements,
    ScatterReduction,
)
from rlx.onnx.emit import Emitter
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter

__all__ = ["col2im"]

_TO_END = 2**31 - 1


def _product(s: Emitter, v: int, start: int, count: int) -> int:
    """prod(v[start:count]) of a 1-D i64 of `count` entries, as a rank-0 node (1 if empty)."""
    return s.reduce(ReduceOp.PROD, s.slice(v, (start,), (count,), (0,)), None, False)


def _digits(s: Emitter, flat: int, radices: int, count: int) -> list[int]:
    """The row-major multi-index (one node per axis) of flat positions `flat`."""
    out = []
    for i in range(count):
        radix = s.take(radices, i, 0)
        out.append(s.binary(BinaryOp.MOD, s.div(flat, _product(s, radices, i + 1, count)),
                            radix))
    return out


@converter("Col2Im")
def col2im(n: NodeContext) -> int:
    s = n.s
    x = n.input(0)
    image, block = (s.cast(n.input(i), DType.I64) for i in (1, 2))
    count = s.shape(image).dims[0]
    if not isinstance(count, int):
        raise n.fail(f"image_shape must have a static length, got {s.shape(image)}")
    pads = tuple(n.attr("pads") or (0,) * (2 * count))
    dilations = tuple(n.attr("dilations") or (1,) * count)
    strides = tuple(n.attr("strides") or (1,) * count)

    def vector(values) -> int:
        return s.const(np.asarray(values, np.int64))

    padded = s.add(s.add(image, vector(pads[:count])), vector(pads[count:]))
    reach = s.mul(vector(dilations), s.sub(block, vector([1] * count)))
    blocks = s.add(s.div(s.sub(s.sub(padded, reach), vector([1] * count)), vector(strides)),
                   vector([1] * count))
    zero, one = s.scalar(0, DType.I64), s.scalar(1, DType.I64)
    rows = s.dim(x, 1)  # C * prod(block)
    per_channel = _product(s, block, 0, count)
    row = s.unsqueeze(s.emit(Range(), zero, rows, one), (1,))  # [C*K, 1]
    col = s.unsqueeze(s.emit(Range(), zero, s.dim(x, 2), one), (0,))  # [1, L]
    offsets = _digits(s, s.binary(BinaryOp.MOD, row, per_channel), block, count)
    places = _digits(s, col, blocks, count)
    image_size = _product(s, padded, 0, count)
    flat = s.mul(s.div(row, per_channel), image_size)
    for i in range(count):
        position = s.add(s.mul(places[i], s.scalar(strides[i], DType.I64)),
                         s.mul(offsets[i], s.scalar(dilations[i], DType.I64)))
        flat = s.add(flat, s.mul(position, _product(s, padded, i + 1, count)))
    data = s.reshape(x, (0, -1))
    index = s.expand(s.reshape(flat, (1, -1)), s.shape_of(data))
    channels = s.div(rows, per_channel)
    size = s.emit(Concat(0), s.shape_of(x, 0, 1),
                  s.reshape(s.mul(channels, image_size), (1,)))
    summed = s.emit(ScatterElements(1, ScatterReduction.ADD), s.fill(size, 0, s.dtype(x)),
                    index, data)
    full = s.emit(Concat(0), s.shape_of(x, 0, 1), s.reshape(channels, (1,)), padded)
    shaped = s.reshape(summed, full)
    ends = tuple(-e if e else _TO_END for e in pads[count:])
    return s.slice(shaped, pads[:count], ends, range(2, 2 + count))
