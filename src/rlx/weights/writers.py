"""Arrays out to weight files: `write_safetensors` and `write_npz`, onto an open stream
(the caller makes it atomic: `rlx.artifact.atomic.atomic_write`).

safetensors, written here:
The format (see `safetensors_file`): an 8-byte little-endian header length, the JSON header
`{name: {"dtype", "shape", "data_offsets"}}` padded with spaces to a multiple of 8 (as the
safetensors package pads it), then the tensors' bytes back to back, little-endian, C order.
No dependency on the `safetensors` package: rlx writes weights with no extra install.
"""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Mapping
from typing import BinaryIO

import numpy as np

from rlx.errors import WeightError
from rlx.weights.safetensors_file import _DTYPES

__all__ = ["write_npz", "write_safetensors"]

_NAMES = {dtype: name for name, dtype in _DTYPES.items()}


def write_safetensors(out: BinaryIO, tensors: Mapping[str, np.ndarray],
                      metadata: Mapping[str, str] | None = None) -> int:
    """Write `tensors` (in the order given) to the binary stream `out` (an atomic file:
    `rlx.artifact.atomic.atomic_write`); returns the bytes written."""
    arrays = {name: np.asarray(value, order="C") for name, value in tensors.items()}
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, array in arrays.items():
        little = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
        dtype = _NAMES.get(little)
        if dtype is None:
            raise WeightError(f"tensor {name!r}: safetensors has no dtype for {array.dtype}")
        arrays[name] = array.astype(little, copy=False)
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    out.write(struct.pack("<Q", len(text)))
    out.write(text)
    for array in arrays.values():
        if array.size:
            out.write(array.reshape(-1).view(np.uint8).data)
    return 8 + len(text) + offset


def write_npz(out: BinaryIO, arrays: Mapping[str, np.ndarray]) -> None:
    """An .npz archive (what `np.load` reads) of `arrays`. `np.savez` would take the names
    as keyword arguments, so a tensor named `file` would clash with its own parameter."""
    with zipfile.ZipFile(out, "w") as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
