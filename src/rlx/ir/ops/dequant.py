"""DequantMatMul: a product with a GGUF- or MLX-packed weight, decoded as it runs.

A family of its own, apart from `rlx.ir.ops.linalg`: only a graph baked with packed
weights has it, and a graph without it imports neither this class nor its kernel (the
codecs' `rlx.kernels.quant`; issue 35).
"""

from __future__ import annotations

from typing import ClassVar

from rlx.codecs.encodings import Encoding
from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op
from rlx.ir.shape import Shape
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["PACKED_SCHEMES", "DequantMatMul", "dequant_inputs"]


PACKED_SCHEMES: tuple[Encoding, ...] = tuple(e for e in Encoding if e.is_block_quantized)
"""The weight encodings DequantMatMul runs: the block encodings of `rlx.codecs` (`Encoding`
members with `is_block_quantized`). The codec table is the one place their block layouts
are written; a new block codec is a new scheme without touching the IR."""


def dequant_inputs(scheme: Encoding) -> int:
    """DequantMatMul's inputs: [x, packed] for GGUF, [x, codes, scales(, biases)] for MLX
    (rlx.codecs.mlx: a block is one quantization group of the codes stream)."""
    return 4 if scheme.value.startswith("mlx_affine") else 3 if scheme.is_mlx else 2


@dataclass(frozen=True)
class DequantMatMul(Op):
    """`x @ W` where W is a GGUF block stream of W^T (the seed's "BT [N, K]" layout).

    Inputs `[x, packed]`: x is `[..., M, K]` float, packed is a flat u8 tensor of
    `N * K / block_size` blocks. `n` is recorded so the output shape `[..., M, N]` never
    depends on guessing; the stream is decoded whole, so blocks may straddle rows of K.
    MLX schemes take `[x, codes, scales, biases]` (affine) or `[x, codes, scales]` (fp
    modes): the codes of W^T row by row, and one scale (and bias) per group along K.
    """

    scheme: Encoding
    n: int
    arity: ClassVar = (2, 4)

    def __post_init__(self) -> None:
        if self.scheme not in PACKED_SCHEMES:
            names = ", ".join(str(s) for s in PACKED_SCHEMES)
            raise ShapeError(f"DequantMatMul: {self.scheme} is not a block encoding; "
                             f"expected one of {names}")

    def infer(self, inputs):
        if len(inputs) != dequant_inputs(self.scheme):
            raise ShapeError(f"DequantMatMul: {self.scheme} takes {dequant_inputs(self.scheme)} "
                             f"inputs, got {len(inputs)}")
        x, packed = inputs[:2]
        if self.scheme.is_mlx:
            self._check_groups(packed, inputs[2:])
        if packed.dtype is not DType.U8 or packed.rank != 1:
            raise ShapeError(f"DequantMatMul: packed weight must be 1-D u8, got {packed}")
        if not x.dtype.is_float:
            raise ShapeError(f"DequantMatMul: x must be floating point, got {x.dtype}")
        if x.rank == 0:
            raise ShapeError("DequantMatMul: x must have rank >= 1, got a scalar")
        k = x.dims[-1]
        nbytes = packed.dims[0]
        if isinstance(k, int) and isinstance(nbytes, int):
            s = self.scheme
            if nbytes % s.block_bytes or nbytes // s.block_bytes * s.block_size != k * self.n:
                raise ShapeError(
                    f"DequantMatMul: {nbytes} bytes of {s} do not hold a [{self.n}, {k}] weight"
                )
        return Shape((*x.dims[:-1], self.n), x.dtype)

    def _check_groups(self, codes: Shape, parts) -> None:
        """MLX: scales (and biases) are [N, groups], one per group of the codes."""
        scales = parts[0]
        want = DType.U8 if not self.scheme.label.startswith("mlx_affine") else None
        if scales.rank != 2 or scales.dims[0] != self.n or (
                want is not None and scales.dtype is not want) or (
                want is None and not scales.dtype.is_float):
            raise ShapeError(f"DequantMatMul {self.scheme}: scales must be "
                             f"[{self.n}, groups] {want or 'float'}, got {scales}")
        for bias in parts[1:]:
            if bias.dims != scales.dims or not bias.dtype.is_float:
                raise ShapeError(f"DequantMatMul {self.scheme}: biases must be float "
                                 f"{list(scales.dims)}, got {bias}")
        groups, nbytes = scales.dims[1], codes.dims[0] if codes.rank == 1 else None
        if isinstance(groups, int) and isinstance(nbytes, int) and \
                nbytes != self.n * groups * self.scheme.block_bytes:
            raise ShapeError(f"DequantMatMul {self.scheme}: {nbytes} code bytes do not match "
                             f"{self.n} x {groups} groups")
