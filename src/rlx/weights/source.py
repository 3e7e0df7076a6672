"""What every weight reader shares: its result before the policy, dtype checks, error wrapping."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

from rlx.errors import WeightError
from rlx.weights.bundle import LoadedWeight

__all__ = ["DENSE_DTYPES", "HALF_DTYPES", "SourceTensors", "check_dense", "reading"]

# Dense dtypes rlx graphs can hold (the numpy side of rlx.ir.DType, which weights may not
# import); anything else in a file is refused rather than converted behind the user's back.
DENSE_DTYPES: frozenset[np.dtype] = frozenset(np.dtype(t) for t in (
    "<f4", "<f2", ml_dtypes.bfloat16, "<f8", "i1", "<i2", "<i4", "<i8",
    "u1", "<u2", "<u4", "<u8", "bool",
))
HALF_DTYPES: frozenset[np.dtype] = frozenset(np.dtype(t) for t in ("<f2", ml_dtypes.bfloat16))


@dataclass
class SourceTensors:
    """One source's tensors as found: dense arrays (native dtype) and packed block streams."""

    dense: dict[str, np.ndarray] = field(default_factory=dict)
    packs: list[LoadedWeight] = field(default_factory=list)
    # matrices stored [N, K] (GGUF's linear-layer orientation, "BT"), dense or packed
    bt: set[str] = field(default_factory=set)

    @property
    def has_native_half(self) -> bool:
        return any(a.dtype in HALF_DTYPES for a in self.dense.values())

    def names(self) -> list[str]:
        return [*self.dense, *(w.name for w in self.packs)]


def check_dense(array: np.ndarray, name: str, path: Path) -> np.ndarray:
    """`array` if rlx can hold its dtype, else a WeightError naming tensor and file."""
    if array.dtype not in DENSE_DTYPES:
        raw_void = array.dtype.kind == "V" and array.dtype.names is None
        hint = " (numpy saves bfloat16 as raw void bytes; use safetensors)" if raw_void else ""
        raise WeightError(f"tensor {name!r} in {path} has unsupported dtype {array.dtype}{hint}")
    return array


@contextlib.contextmanager
def reading(path: Path, kind: str, *errors: type[BaseException]) -> Iterator[None]:
    """Turn I/O errors and the library errors listed (a corrupt file) into one-line
    WeightErrors naming the file."""
    try:
        yield
    except OSError as err:
        raise WeightError(f"cannot read {kind} file {path}: {err.strerror or err}") from err
    except errors as err:
        detail = " ".join(str(err).split())  # library messages may span lines
        raise WeightError(f"corrupt {kind} file {path}: {detail}") from err
