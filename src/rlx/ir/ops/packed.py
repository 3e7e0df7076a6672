"""Weights stored encoded, for any consumer: DecodeWeight, and DequantGather for embeddings.

`DequantMatMul` covers one consumer (a MatMul's right operand). Conv, ConvTranspose, a
MatMul's left operand, recurrent weights, control-flow captures and every other float
constant would each need their own packed op and kernel; `DecodeWeight` instead turns a
packed byte stream back into the dense tensor the consumer already reads, so every consumer
and its kernel work unchanged. Its kernel decodes once per packed array (a baked weight is
the same read-only constant on every run), measured 1-6% faster than decoding on every call
(see rlx.kernels.packed). Embedding tables are the exception: they are large
and each run reads a few rows, so `DequantGather` decodes only the rows it gathers.

The stored layout is "padded rows": the tensor (first transposed by `perm`, when given) is
flattened row-major into `rows` rows of equal length L, and each row is padded with zeros
to a whole number of blocks, so a block never straddles two rows (for a Conv, one row is one
output channel's C_in/group x kH x kW reduction).

A `DecodeWeight` may also take row exponents: int8 `[S]`; the decoded tensor (in its stored
order, as S equal rows) is multiplied row by row by 2^e (exact). The bake divides each
output channel by the power of two just above its largest value before encoding, so every
channel fills at least half its blocks' range whatever its neighbours hold: without them,
a block of short rows stored as one stream spans channels whose ranges differ by 10^3-10^5
(BatchNorm folded into a depthwise conv), and the small channels' codes round to zero. One
byte a channel (f32 scales took 4: +42% on a 3x3 depthwise conv's rows of 9).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from rlx.codecs.encodings import Encoding
from rlx.codecs.rows import decode_rows, scale_rows
from rlx.errors import BakeError, ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op
from rlx.ir.shape import Shape
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["padded_row_bytes", "DecodeWeight", "DequantGather"]


def padded_row_bytes(encoding: Encoding, length: int) -> int:
    """Bytes one row of `length` values takes, padded to whole blocks."""
    return -(-length // encoding.block_size) * encoding.block_bytes


def _check_stream(op: Op, encoding: Encoding, packed: Shape, rows: int, length: int) -> None:
    if packed.dtype is not DType.U8 or packed.rank != 1:
        raise ShapeError(f"{op.op_name}: packed weight must be 1-D u8, got {packed}")
    want = rows * padded_row_bytes(encoding, length)
    got = packed.dims[0]
    if isinstance(got, int) and got != want:
        raise ShapeError(f"{op.op_name}: {got} bytes of {encoding} do not hold {rows} "
                         f"row(s) of {length} values ({want} bytes)")


def _check_row_exponents(exponents: Shape, numel: int) -> None:
    count = exponents.dims[0] if exponents.rank == 1 else None
    if exponents.dtype is not DType.I8 or not isinstance(count, int) or count <= 0 \
            or numel % count:
        raise ShapeError(f"DecodeWeight: row exponents must be i8 [S] with S dividing {numel} "
                         f"values, got {exponents}")


@dataclass(frozen=True)
class DecodeWeight(Op):
    """The dense float32 tensor of `shape` stored as padded rows of `encoding`.

    Inputs: the flat u8 stream, and optionally the row exponents (module doc). `perm` (empty:
    none) is the transpose applied before storing; the output is transposed back, so it is
    always `shape`.
    """

    encoding: Encoding
    shape: tuple[int, ...]
    rows: int
    perm: tuple[int, ...] = ()
    arity: ClassVar = (1, 2)

    @property
    def stored_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[p] for p in self.perm) if self.perm else self.shape

    @property
    def row_length(self) -> int:
        numel = 1
        for d in self.shape:
            numel *= d
        return numel // self.rows if self.rows else 0

    def infer(self, inputs):
        packed = inputs[0]
        numel = 1
        for d in self.shape:
            if d < 0:
                raise ShapeError(f"DecodeWeight: bad shape {list(self.shape)}")
            numel *= d
        if self.rows <= 0 or numel % self.rows:
            raise ShapeError(f"DecodeWeight: {numel} values do not split into {self.rows} rows")
        if self.perm and sorted(self.perm) != list(range(len(self.shape))):
            raise ShapeError(f"DecodeWeight: perm {list(self.perm)} is not a permutation of "
                             f"{len(self.shape)} axes")
        _check_stream(self, self.encoding, packed, self.rows, numel // self.rows)
        if len(inputs) == 2:
            _check_row_exponents(inputs[1], numel)
        return Shape(self.shape, DType.F32)

    def dense(self, packed: np.ndarray, exponents: np.ndarray | None = None) -> np.ndarray:
        """The `shape` float32 tensor the packed bytes (and row `exponents`) hold
        (BakeError if they do not fit): the one definition the kernel and `RlxFile.tensor`
        share."""
        dense = decode_rows(self.encoding, packed, self.rows, self.row_length)
        if exponents is not None:
            exponents = np.asarray(exponents).reshape(-1)
            if not exponents.size or dense.size % exponents.size:
                raise BakeError(f"{exponents.size} row exponents do not divide {dense.size} "
                                "values")
            dense = scale_rows(dense.reshape(exponents.size, -1), exponents)
        dense = dense.reshape(self.stored_shape)
        if self.perm:
            dense = dense.transpose(np.argsort(self.perm))
        return np.ascontiguousarray(dense, dtype=np.float32)


@dataclass(frozen=True)
class DequantGather(Op):
    """ONNX Gather on axis 0 of a `[V, D]` float32 table stored as V padded rows.

    Inputs `[packed, indices]`; output `indices.dims + [D]`. Only the gathered rows are
    decoded.
    """

    encoding: Encoding
    vocab: int
    dim: int
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        packed, indices = inputs
        if self.vocab <= 0 or self.dim <= 0:
            raise ShapeError(f"DequantGather: bad table [{self.vocab}, {self.dim}]")
        _check_stream(self, self.encoding, packed, self.vocab, self.dim)
        if indices.dtype not in (DType.I32, DType.I64):
            raise ShapeError(f"DequantGather: indices must be int32/int64, got {indices.dtype}")
        return Shape((*indices.dims, self.dim), DType.F32)
