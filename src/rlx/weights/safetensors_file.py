"""Safetensors reader: the header parsed and validated here, the tensors memory-mapped in place.

Why not `safetensors.safe_open(framework="numpy")`: it copies every tensor into a bytearray
(measured: +256 MB of RSS for one 256 MB tensor), while a weights file should cost no RAM
until it is read. The format fits on a page: an 8-byte little-endian header length N, N bytes
of UTF-8 JSON `{name: {"dtype", "shape", "data_offsets": [begin, end]}}` with an optional
`"__metadata__"` str -> str map, then the data section. Offsets are relative to the data
section, and the tensors tile it exactly: sorted by offset, no gap, no overlap, nothing left
over. Those are the package's own rules; a file that breaks one is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from rlx.errors import WeightError
from rlx.safeio import JsonLimits, load_json, map_file
from rlx.weights.source import SourceTensors

__all__ = ["read_safetensors"]

MAX_HEADER_BYTES = 100_000_000  # the safetensors package's own limit
# A header nests 3 levels ({name: {"shape": [...]}}) and holds 3 containers per tensor: the
# limits keep its parsed objects (~700 bytes a tensor) within 8x the file, so a file of
# 200,000 empty tensors is refused while a real one (KBs per tensor) is far from them.
_HEADER_LIMITS = JsonLimits(max_depth=8, bytes_per_container=48)
MAX_RANK = 32  # what every numpy (1.x: 32, 2.x: 64) can reshape to; and, even for an
# empty tensor, the product of the other dims must fit numpy's index type

# The safetensors dtypes rlx can hold; F8, F4 and complex tensors are refused.
_DTYPES: dict[str, np.dtype] = {name: np.dtype(t) for name, t in {
    "BOOL": "bool", "U8": "u1", "I8": "i1", "U16": "<u2", "I16": "<i2", "U32": "<u4",
    "I32": "<i4", "U64": "<u8", "I64": "<i8", "F16": "<f2", "BF16": ml_dtypes.bfloat16,
    "F32": "<f4", "F64": "<f8",
}.items()}


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    begin: int
    end: int


def read_safetensors(path: Path) -> SourceTensors:
    """Every tensor of a safetensors file, native dtype, as read-only views of its bytes
    (a leased map, or a private copy: `rlx.safeio.mapping`)."""
    mapped = map_file(path, WeightError)
    size, buffer = len(mapped), mapped.buffer
    header_len, header = _read_header(buffer, size, path)
    entries = [_entry(name, value, path) for name, value in header.items()
               if name != "__metadata__"]
    _check_metadata(header.get("__metadata__", {}), path)
    del header  # its objects cost more than the entries
    data_start = 8 + header_len
    _check_tiling(entries, size - data_start, path)
    if not entries:
        return SourceTensors()
    data = np.frombuffer(buffer, np.uint8)
    return SourceTensors(dense={
        e.name: data[data_start + e.begin:data_start + e.end].view(e.dtype).reshape(e.shape)
        for e in entries
    })


def _corrupt(path: Path, what: str) -> WeightError:
    return WeightError(f"corrupt safetensors file {path}: {what}")


def _read_header(buffer, size: int, path: Path) -> tuple[int, dict[str, Any]]:
    """The header's length and its JSON object; its length is checked before it is read."""
    if size < 8:
        raise _corrupt(path, f"{size} bytes, too short for the 8-byte header length")
    header_len = int.from_bytes(buffer[:8], "little")
    if header_len > MAX_HEADER_BYTES:
        raise _corrupt(path, f"header length {header_len} exceeds the "
                             f"{MAX_HEADER_BYTES}-byte limit")
    if header_len > size - 8:
        raise _corrupt(path, f"header length {header_len} exceeds the file ({size} bytes)")
    header = load_json(bytes(buffer[8:8 + header_len]), WeightError,
                       f"corrupt safetensors file {path}: header", _HEADER_LIMITS,
                       object_pairs_hook=_no_duplicate_keys)
    if not isinstance(header, dict):
        raise _corrupt(path, "header is not a JSON object")
    return header_len, header


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate key(s) {sorted({k for k in keys if keys.count(k) > 1})}")
    return dict(pairs)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry(name: str, info: Any, path: Path) -> _Entry:
    """One tensor's header entry, checked: known dtype, sane shape and offsets, sizes agree."""
    if not isinstance(info, dict):
        raise _corrupt(path, f"entry {name!r} is not an object")
    shape, offsets, dtype_name = info.get("shape"), info.get("data_offsets"), info.get("dtype")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise _corrupt(path, f"tensor {name!r}: shape {shape!r} is not a list of sizes")
    if len(shape) > MAX_RANK or math.prod(max(d, 1) for d in shape) >= 2**62:
        raise _corrupt(path, f"tensor {name!r}: shape {shape} is more than an array can hold")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))
            and offsets[0] <= offsets[1]):
        raise _corrupt(path, f"tensor {name!r}: bad data_offsets {offsets!r}")
    dtype = _DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    if dtype is None:
        raise WeightError(f"tensor {name!r} in {path} has unsupported safetensors dtype "
                          f"{dtype_name!r}; rlx reads {', '.join(_DTYPES)}")
    need = math.prod(shape) * dtype.itemsize
    if need != offsets[1] - offsets[0]:
        raise _corrupt(path, f"tensor {name!r}: {dtype_name}{shape} needs {need} bytes, its "
                             f"data_offsets span {offsets[1] - offsets[0]}")
    return _Entry(name, dtype, tuple(shape), offsets[0], offsets[1])


def _check_metadata(metadata: Any, path: Path) -> None:
    if metadata is None:  # `"__metadata__": null`, as mlx writes it (the package accepts it)
        return
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _corrupt(path, "__metadata__ must map strings to strings")


def _check_tiling(entries: list[_Entry], data_bytes: int, path: Path) -> None:
    """The tensors cover the data section exactly once, in offset order."""
    end = 0
    for e in sorted(entries, key=lambda e: (e.begin, e.end)):
        if e.begin != end:
            what = "overlaps the tensor before it" if e.begin < end else \
                f"leaves a gap at data bytes {end}..{e.begin}"
            raise _corrupt(path, f"tensor {e.name!r} at data_offsets [{e.begin}, {e.end}] "
                                 f"{what}")
        end = e.end
    if end != data_bytes:
        raise _corrupt(path, f"tensors cover {end} data bytes, the file holds {data_bytes}")
