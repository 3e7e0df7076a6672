"""Leaf ops: graph inputs, unbound weights (`Param`) and constants."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from rlx.errors import ShapeError
from rlx.ir.ops.base import Op
from rlx.ir.shape import Shape
from rlx.payload import Deferred, Payload, byte_view
from rlx.record import dataclass, field  # dataclasses', cheaper to create

__all__ = ["Input", "Param", "Constant", "as_byte_array"]


@dataclass(frozen=True)
class Input(Op):
    """A value fed at run time, by name."""

    name: str
    arity: ClassVar = (0, 0)


@dataclass(frozen=True)
class Param(Op):
    """A named weight whose value is bound later (by `bake` or at compile)."""

    name: str
    arity: ClassVar = (0, 0)


def as_byte_array(data) -> np.ndarray:
    """View any buffer (bytes, memoryview, mmap, numpy array) as flat uint8, without copying."""
    if isinstance(data, np.ndarray):
        if data.dtype == np.uint8 and data.ndim == 1 and data.flags.c_contiguous:
            return data  # a file's blob as the reader viewed it: no second view of it
        arr = np.ascontiguousarray(data)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return arr.reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


@dataclass(frozen=True, eq=False, slots=True)
class Constant(Op):
    """Raw little-endian bytes in the node's dtype, laid out row-major.

    `data` is kept as a flat uint8 view of whatever buffer it came from, so a constant can
    point into a memory-mapped file, or is a `Deferred` (`rlx.deferred`: a large weight
    of a bake, read from its file or computed each time it is used). An empty payload
    means the bytes were stripped from the graph (compact memory mode) and must be
    materialised before running.
    """

    data: Payload = field(repr=False)
    arity: ClassVar = (0, 0)

    def __post_init__(self):
        if not isinstance(self.data, Deferred):
            object.__setattr__(self, "data", as_byte_array(self.data))

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    @property
    def is_stripped(self) -> bool:
        return self.data.nbytes == 0

    def array(self, shape: Shape) -> np.ndarray:
        """The payload as a read-only array of `shape` (a view, or a deferred one's read)."""
        if not shape.is_static:
            raise ShapeError(f"constant with symbolic shape {shape}")
        if self.nbytes != shape.nbytes:
            raise ShapeError(
                f"constant payload is {self.nbytes} bytes, shape {shape} needs {shape.nbytes}"
            )
        data = byte_view(self.data.read()) if isinstance(self.data, Deferred) else self.data
        try:
            arr = data.view(shape.dtype.numpy).reshape(shape.dims)
        except ValueError as err:  # dims no array can have, e.g. [0, 2**64]
            raise ShapeError(f"constant of shape {shape}: {err}") from None
        arr.flags.writeable = False
        return arr

    def payload(self, shape: Shape) -> Payload:
        """The payload as an array of `shape` without reading it: a deferred one stays
        deferred (for `rlx.deferred.row_blocks`), bytes become a view (`array`)."""
        data = self.data
        if isinstance(data, Deferred) and data.dtype == shape.dtype.numpy \
                and shape.is_static and data.nbytes == shape.nbytes:
            return data.reshape(tuple(int(d) for d in shape.dims))
        return self.array(shape)

    def __repr__(self) -> str:
        return f"Constant(<{self.nbytes} bytes>)"
