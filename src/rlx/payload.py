"""What a constant holds: an array, or a `Deferred` one, produced when it is read.

The graph, the constants and the weight rows of an artifact name these, and a load of a
file (whose constants are all arrays, views of its map) uses nothing else of the streaming
bake (`rlx.deferred`: file views read with `pread`, computed arrays, row blocks), so they
live here, apart from it: a numpy load does not import the bake's ~50 KiB of code.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["CHUNK_BYTES", "Deferred", "Payload", "byte_view", "materialize"]

CHUNK_BYTES = 16 << 20
"""How much of a deferred array `chunks` holds at a time."""


class Deferred(abc.ABC):
    """An array of known `shape` and `dtype` whose values are produced by `read`."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._fingerprint: bytes | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @abc.abstractmethod
    def read(self) -> np.ndarray:
        """A new read-only C-contiguous array of `shape` and `dtype`."""

    @abc.abstractmethod
    def reshape(self, shape: tuple[int, ...]) -> Deferred:
        """The same bytes under another shape of the same size."""

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows `start:stop` of the first axis, as a new array (here: of a whole read;
        a file view and a row-wise computation read only those rows)."""
        return self.read()[start:stop]

    def chunks(self, size: int = CHUNK_BYTES) -> Iterator[memoryview]:
        """The bytes in order, at most `size` at a time (each valid until the next)."""
        data = byte_view(self.read())
        for start in range(0, data.size, size):
            yield data[start:start + size].data

    def fingerprint(self) -> bytes:
        """16 bytes that equal arrays of the same kind share (a hash: `same` confirms)."""
        if self._fingerprint is None:
            self._fingerprint = self._digest()
        return self._fingerprint

    @abc.abstractmethod
    def _digest(self) -> bytes: ...

    @abc.abstractmethod
    def same(self, other: Deferred) -> bool:
        """Whether `other` certainly holds the same values (False may miss, never lies)."""

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.read()
        return array if dtype is None else array.astype(dtype)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dtype}{list(self.shape)})"


Payload = np.ndarray | Deferred
"""What a Constant, a weight-table row or a weight binding holds."""


def byte_view(array: np.ndarray) -> np.ndarray:
    """A C-contiguous array's bytes as flat uint8 (a view); other arrays are copied first."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def materialize(value: Payload) -> np.ndarray:
    """The array itself: read if deferred."""
    return value.read() if isinstance(value, Deferred) else value
