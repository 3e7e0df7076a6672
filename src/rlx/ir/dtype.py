"""Element types of tensors and their numpy counterparts."""

from __future__ import annotations

import enum

import numpy as np

from rlx.enums import parse_enum
from rlx.errors import GraphError

__all__ = ["DType"]


class DType(enum.Enum):
    """Closed set of tensor element types, named like the seed (`f32`, `u8`, `bool`)."""

    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    F64 = "f64"
    I8 = "i8"
    I16 = "i16"
    I32 = "i32"
    I64 = "i64"
    U8 = "u8"
    U16 = "u16"
    U32 = "u32"
    U64 = "u64"
    BOOL = "bool"

    @property
    def numpy(self) -> np.dtype:
        dtype = _TO_NUMPY.get(self)
        return _bfloat16() if dtype is None else dtype

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.F32, DType.F16, DType.BF16, DType.F64)

    @property
    def is_int(self) -> bool:
        return not self.is_float and self is not DType.BOOL

    @classmethod
    def from_numpy(cls, dtype: np.dtype | type) -> DType:
        dt = np.dtype(dtype)
        if dt not in _FROM_NUMPY and dt.name == "bfloat16":
            _bfloat16()
        try:
            return _FROM_NUMPY[dt]
        except KeyError:
            raise GraphError(f"numpy dtype {dt} has no rlx DType") from None

    @classmethod
    def parse(cls, text: str) -> DType:
        return parse_enum(cls, text, lambda t: GraphError(
            f"unknown dtype {t!r}; expected one of {', '.join(d.value for d in cls)}"))

    def __str__(self) -> str:
        return self.value


_TO_NUMPY: dict[DType, np.dtype] = {
    DType.F32: np.dtype("<f4"),
    DType.F16: np.dtype("<f2"),
    DType.F64: np.dtype("<f8"),
    DType.I8: np.dtype("i1"),
    DType.I16: np.dtype("<i2"),
    DType.I32: np.dtype("<i4"),
    DType.I64: np.dtype("<i8"),
    DType.U8: np.dtype("u1"),
    DType.U16: np.dtype("<u2"),
    DType.U32: np.dtype("<u4"),
    DType.U64: np.dtype("<u8"),
    DType.BOOL: np.dtype("bool"),
}
_FROM_NUMPY: dict[np.dtype, DType] = {v: k for k, v in _TO_NUMPY.items()}


def _bfloat16() -> np.dtype:
    """bf16's numpy dtype, registered on first use: `ml_dtypes` takes longer to import
    (~8 ms) than the rest of a small model's load, and few graphs hold bf16."""
    import ml_dtypes

    dtype = np.dtype(ml_dtypes.bfloat16)
    _TO_NUMPY[DType.BF16], _FROM_NUMPY[dtype] = dtype, DType.BF16
    return dtype
