"""Tensor shapes: a tuple of dims (static `int` or symbolic `str`) and a dtype.

A symbolic dim such as `"batch"` is bound to one size per run; the special name `"?"`
(`UNKNOWN`) is a dim inference could not determine and is never unified with another.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["Dim", "UNKNOWN", "MAX_RANK", "Shape", "broadcast_dims", "normalize_axis"]

Dim = int | str
UNKNOWN = "?"
MAX_RANK = 32  # the most dims numpy 1.x arrays can have (2.x: 64); kernels need arrays


@dataclass(frozen=True, slots=True)
class Shape:
    dims: tuple[Dim, ...]
    dtype: DType = DType.F32

    def __init__(self, dims: Iterable[Dim], dtype: DType = DType.F32):
        dims = tuple(d if isinstance(d, str) else int(d) for d in dims)
        if len(dims) > MAX_RANK:
            raise ShapeError(f"shape of rank {len(dims)}: at most {MAX_RANK} dims")
        if any(isinstance(d, int) and d < 0 for d in dims):
            raise ShapeError(f"negative dim in shape {list(dims)}")
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "dtype", dtype)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.dims)

    @property
    def static_dims(self) -> tuple[int, ...]:
        """`dims` of a static shape; ShapeError when one is symbolic (check `is_static`
        first where another error is wanted)."""
        dims = tuple(d for d in self.dims if isinstance(d, int))
        if len(dims) != len(self.dims):
            raise ShapeError(f"shape {self} has symbolic dims where static ones are needed")
        return dims

    @property
    def numel(self) -> int | None:
        """Element count, or None when a dim is symbolic."""
        static = [d for d in self.dims if isinstance(d, int)]
        return math.prod(static) if len(static) == len(self.dims) else None

    @property
    def nbytes(self) -> int | None:
        n = self.numel
        return None if n is None else n * self.dtype.itemsize

    def with_dims(self, dims: Iterable[Dim]) -> Shape:
        return Shape(dims, self.dtype)

    def with_dtype(self, dtype: DType) -> Shape:
        return Shape(self.dims, dtype)

    def matches(self, other: Shape) -> bool:
        """Equal, treating `UNKNOWN` on either side as a wildcard."""
        return (
            self.dtype == other.dtype
            and self.rank == other.rank
            and all(a == b or UNKNOWN in (a, b) for a, b in zip(self.dims, other.dims))
        )

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.dims)}]"


def broadcast_dims(*shapes: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """NumPy broadcasting over static and symbolic dims."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        out.append(_broadcast_dim(dims, shapes))
    return tuple(out)


def _broadcast_dim(dims: list[Dim], shapes) -> Dim:
    sized = {d for d in dims if d != 1}
    if not sized:
        return 1
    if len(sized) == 1:
        return sized.pop()
    static = {d for d in sized if isinstance(d, int)}
    if len(static) > 1 or static and 0 in static and len(sized) > 1:
        raise ShapeError(f"cannot broadcast shapes {[list(s) for s in shapes]}")
    return static.pop() if static else UNKNOWN


def normalize_axis(axis: int, rank: int) -> int:
    """Map a possibly negative axis into [0, rank); raise on out-of-range."""
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0
