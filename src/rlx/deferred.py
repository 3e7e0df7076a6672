"""Arrays read or computed when they are used: how a bake handles weights larger than memory.

A bake looks at every weight several times (the zero and ternary checks, the encoding
plan, dedupe, the write). Held as arrays, a model's weights and everything derived from
them (Q8_0 blocks, f16 copies, folded transposes, decoded GGUF tensors) would all be in
memory at once, and even weights that stay views of a mapped file would not: every page a
pass touches joins the process's resident set. A `Deferred` (`rlx.payload`) holds only how
to get its array:

- `FileView`: a slice of a file mapped under a lease (`rlx.safeio.mapping`), read with
  `pread` each time, so its pages never become resident;
- `Computed`: a pure function of other arrays (deferred or not) and plain parameters,
  run on each read.

Each read gives a new array that its reader drops when done, so a bake holds one tensor's
arrays at a time, and `row_blocks` gives a weight in blocks of rows, so a check or an
encoding that works row by row holds one block of it: the bake's peak then does not grow
with the largest weight. Reads repeat work (a weight three passes look at is read three times);
`fingerprint` and `same` let dedupe compare computed arrays by their recipes instead of
computing them. Arrays under `DEFER_MIN_BYTES` are not worth it and stay arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import xxhash

from rlx.errors import BakeError, RlxError
from rlx.payload import CHUNK_BYTES, Deferred, Payload, byte_view, materialize
from rlx.safeio import in_leased_map, read_from_file

__all__ = ["CHUNK_BYTES", "DEFER_MIN_BYTES", "Computed", "Deferred", "FileView", "Payload",
           "all_rows", "byte_view", "compute", "defer", "materialize", "read_rows", "row_blocks"]

DEFER_MIN_BYTES = 1 << 20
"""Arrays this large and larger are deferred; smaller ones (biases, norms, shape
arithmetic) cost less as arrays than as repeated reads."""


class FileView(Deferred):
    """A C-contiguous view of a leased file map, read from the file rather than the map."""

    def __init__(self, view: np.ndarray):
        super().__init__(view.shape, view.dtype)
        self._bytes = byte_view(view)

    def read(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        self._fill(byte_view(out), 0)
        out.flags.writeable = False
        return out

    def reshape(self, shape: tuple[int, ...]) -> Deferred:
        return FileView(self._bytes.view(self.dtype).reshape(shape))

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        row_bytes = self.nbytes // self.shape[0]
        out = np.empty((stop - start, *self.shape[1:]), self.dtype)
        self._fill(byte_view(out), start * row_bytes)
        out.flags.writeable = False
        return out

    def chunks(self, size: int = CHUNK_BYTES) -> Iterator[memoryview]:
        buffer = np.empty(min(size, self.nbytes), np.uint8)  # one buffer for every piece
        for start in range(0, self.nbytes, size):
            piece = buffer[:min(size, self.nbytes - start)]
            self._fill(piece, start)
            yield piece.data

    def _fill(self, out: np.ndarray, start: int) -> None:
        source = self._bytes[start:start + out.size]
        if not read_from_file(source.ctypes.data, out.data):
            out[...] = source  # a broken lease's private copy

    def _digest(self) -> bytes:
        digest = xxhash.xxh3_128(f"{self.dtype.str}{self.shape}".encode())
        for piece in self.chunks():
            digest.update(piece)
        return digest.digest()

    def same(self, other: Deferred) -> bool:
        if not isinstance(other, FileView) or other.dtype != self.dtype \
                or other.shape != self.shape:
            return False
        if other._bytes.ctypes.data == self._bytes.ctypes.data:
            return True
        return all(np.array_equal(np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8))
                   for a, b in zip(self.chunks(), other.chunks()))


class Computed(Deferred):
    """`fn(*params, *inputs)`, computed on each read.

    `fn` must be pure and deterministic, `params` plain values that compare with `==`
    (no arrays: those go in `inputs`), and the result `dtype` and `shape` (any shape of
    that size). Equal functions of the same inputs and params are the same array: that is
    what `same` checks, without computing either. `label` names it in errors (say, the
    node a fold came from) and is no part of what it is. `rowwise`: row i of the result
    depends only on row i of every input (a cast, a per-row scale, an encoding of padded
    rows), so rows of it are computed from those rows alone (`read_rows`, `chunks`); its
    rows stay its rows under a `reshape` (an encoded stream declared flat is still written a
    block of rows at a time). `streamed`: `fn` is given its inputs as
    they are (a deferred one unread) and reads them itself a block at a time (`row_blocks`),
    so its result does not cost a whole read of a large input beside it."""

    def __init__(self, fn: Callable[..., Any], inputs: tuple[Payload, ...], params: tuple,
                 shape: tuple[int, ...], dtype: np.dtype | type, label: str | None = None,
                 rowwise: bool = False, streamed: bool = False, rows: int | None = None):
        super().__init__(shape, np.dtype(dtype))
        self.fn, self.inputs, self.params = fn, tuple(inputs), tuple(params)
        self.label, self.rowwise, self.streamed = label, rowwise and bool(shape), streamed
        self.rows = self.shape[0] if rows is None and self.rowwise else rows or 0
        """Rowwise: how many rows the inputs' first axes and the result hold (the result's
        first axis unless reshaped since)."""

    def read(self) -> np.ndarray:
        value = self.evaluate().view()  # read-only, whatever it is a view of
        value.flags.writeable = False
        return value

    def evaluate(self) -> np.ndarray:
        """The result, checked against the declared dtype and size, as a new array."""
        inputs = self.inputs if self.streamed else tuple(materialize(i) for i in self.inputs)
        return self._run(inputs, self.shape)

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        if not self.rowwise or self.shape[0] != self.rows:
            return super().read_rows(start, stop)
        return self._rows_of(start, stop).reshape((stop - start, *self.shape[1:]))

    def chunks(self, size: int = CHUNK_BYTES) -> Iterator[memoryview]:
        if not self.rowwise:
            yield from super().chunks(size)
            return
        step = max(1, size // max(1, self.nbytes // max(self.rows, 1)))
        for start in range(0, self.rows, step):
            yield byte_view(self._rows_of(start, min(self.rows, start + step))).data

    def _rows_of(self, start: int, stop: int) -> np.ndarray:
        """Rows `start:stop` of a rowwise result, computed from those rows of its inputs."""
        rows = tuple(read_rows(i, start, stop) for i in self.inputs)
        value = self._run(rows, (stop - start, self.size // self.rows))
        value.flags.writeable = False
        return value

    def _run(self, inputs: tuple[Payload, ...], shape: tuple[int, ...]) -> np.ndarray:
        try:
            value = np.asarray(self.fn(*self.params, *inputs))
        except (RlxError, OSError):  # typed already, or the file under an input failing
            raise
        except Exception as err:
            raise BakeError(f"{self.label or self._name()}, deferred as too large to hold, "
                            f"failed when read: {err}") from err
        if value.dtype != self.dtype or value.size != math.prod(shape):
            raise BakeError(f"{self.label or self._name()} gave {value.dtype}"
                            f"{list(value.shape)}, declared {self.dtype}{list(shape)}")
        return np.ascontiguousarray(value).reshape(shape)

    def reshape(self, shape: tuple[int, ...]) -> Deferred:
        return Computed(self.fn, self.inputs, self.params, shape, self.dtype, self.label,
                        self.rowwise, self.streamed, self.rows)

    def _name(self) -> str:
        return f"{getattr(self.fn, '__module__', '')}.{getattr(self.fn, '__qualname__', self.fn)}"

    def _digest(self) -> bytes:
        digest = xxhash.xxh3_128(f"{self._name()}{self.params!r}{self.dtype.str}".encode())
        for item in self.inputs:
            digest.update(_input_digest(item))
        return digest.digest()

    def same(self, other: Deferred) -> bool:
        return isinstance(other, Computed) and other.fn is self.fn \
            and other.params == self.params and other.dtype == self.dtype \
            and other.size == self.size and len(other.inputs) == len(self.inputs) \
            and all(_same_input(a, b) for a, b in zip(self.inputs, other.inputs))

    def __repr__(self) -> str:
        return f"Computed({self._name()}, {self.dtype}{list(self.shape)})"


def _input_digest(item: Payload) -> bytes:
    if isinstance(item, Deferred):
        return item.fingerprint()
    array = np.ascontiguousarray(item)
    return xxhash.xxh3_128_digest(f"{array.dtype.str}{array.shape}".encode()
                                  + byte_view(array).tobytes())


def _same_input(a: Payload, b: Payload) -> bool:
    if isinstance(a, Deferred) or isinstance(b, Deferred):
        return isinstance(a, Deferred) and isinstance(b, Deferred) and a.same(b)
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))


def read_rows(value: Payload, start: int, stop: int) -> np.ndarray:
    """Rows `start:stop` of `value`'s first axis: a view of an array, a read of a deferred one."""
    return value.read_rows(start, stop) if isinstance(value, Deferred) else value[start:stop]


def row_blocks(value: Payload, multiple: int = 1,
               max_bytes: int = CHUNK_BYTES) -> Iterator[np.ndarray]:
    """`value` (rank >= 1) along its first axis in consecutive blocks of about `max_bytes`
    whose row counts are multiples of `multiple` (a codec's block along that axis; the last
    block may be shorter): a check or an encoding that works row by row holds one block."""
    rows = value.shape[0]
    row_bytes = max(1, value.nbytes // max(rows, 1))
    step = max(multiple, max_bytes // row_bytes // multiple * multiple)
    for start in range(0, rows, step):
        yield read_rows(value, start, min(rows, start + step))


def all_rows(value: Payload, check: Callable[[np.ndarray], bool]) -> bool:
    """Whether `check` holds for every block of `value`'s rows (`row_blocks`; a scalar is
    checked whole): a check over a large weight that never holds it whole."""
    if not value.ndim:
        return bool(check(materialize(value)))
    return all(check(block) for block in row_blocks(value))


def defer(value: Payload) -> Payload:
    """`value` as a `FileView` when it is a large contiguous view of a leased file map
    (a weights file: reading it through the map would make it resident), else as it is."""
    if isinstance(value, np.ndarray) and value.nbytes >= DEFER_MIN_BYTES \
            and value.flags.c_contiguous and in_leased_map(value.ctypes.data, value.nbytes):
        return FileView(value)
    return value


def compute(fn: Callable[..., Any], inputs: tuple[Payload, ...], params: tuple,
            shape: tuple[int, ...], dtype: np.dtype | type, rowwise: bool = False,
            streamed: bool = False) -> Payload:
    """`fn(*params, *inputs)` (see `Computed`): deferred when the result takes
    `DEFER_MIN_BYTES` or more, computed now otherwise."""
    computed = Computed(fn, inputs, params, shape, dtype, rowwise=rowwise, streamed=streamed)
    return computed if computed.nbytes >= DEFER_MIN_BYTES else computed.evaluate()
