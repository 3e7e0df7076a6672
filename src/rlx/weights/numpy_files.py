"""`.npy` and `.npz` readers: `np.load` with pickles refused, native dtypes kept.

A `.npy` file is one tensor named after the file's stem, memory-mapped; an `.npz` archive
holds one tensor per member, named like the member (np.savez's keyword), read into memory
(zip members cannot be mapped). Before numpy reads a member, its `.npy` header is checked
against the member's size: numpy allocates the array a header declares before reading a
byte of it, so a 1 KB archive could otherwise make it reserve terabytes. The header's own
length is checked first for the same reason: numpy reads all of it (up to 4 GiB) before
comparing it with its 10,000-byte limit.
"""

from __future__ import annotations

import io
import math
import tokenize
import zipfile
import zlib
from pathlib import Path

import numpy as np

from rlx.errors import WeightError
from rlx.safeio import map_file
from rlx.weights.source import SourceTensors, check_dense, reading

__all__ = ["read_npy", "read_npz"]

# What np.load and zipfile raise on a damaged file: a bad header literal (ValueError,
# SyntaxError, TokenError, RecursionError from numpy's own parser), a bad dtype (TypeError),
# a shape too large (OverflowError), short data (EOFError), zip damage (BadZipFile,
# zlib.error, NotImplementedError for unknown versions and methods), pickles (ValueError).
_LOAD_ERRORS = (ValueError, EOFError, OverflowError, TypeError, SyntaxError, RecursionError,
                tokenize.TokenError, NotImplementedError, zlib.error, zipfile.BadZipFile)
_DEFLATE_MAX_RATIO = 1032  # deflate cannot expand one byte into more than this many
_MAX_HEADER_BYTES = 10_000  # numpy's own limit on an .npy header (max_header_size)


_MAX_RANK = 32  # numpy 1.x's limit; and the product of the non-zero dims must be indexable


def read_npy(path: Path) -> SourceTensors:
    """The tensor of an `.npy` file, a read-only view of its bytes (a leased map or a
    private copy: `rlx.safeio.mapping`); numpy's own `np.load(mmap_mode=)` maps by path
    with no protection against the file shrinking under it."""
    mapped = map_file(path, WeightError)
    buffer, where = mapped.buffer, f"corrupt .npy file {path}"
    if bytes(buffer[:4]) == b"PK\x03\x04":
        raise WeightError(f"{path} is an .npz archive, not an .npy file")
    if bytes(buffer[:6]) != np.lib.format.MAGIC_PREFIX:
        raise WeightError(f"{where}: no .npy magic (\\x93NUMPY)")
    with reading(path, ".npy", *_LOAD_ERRORS):
        stream = io.BytesIO(bytes(buffer[:16 + _MAX_HEADER_BYTES]))
        _header_length(stream, where)
        stream.seek(0)
        shape, fortran, dtype = _read_header(stream)
    if dtype.hasobject:
        raise WeightError(f"{where}: holds Python objects, which only a pickle can load "
                          "(rlx loads with allow_pickle=False)")
    _check_shape(shape, where)
    start, count = stream.tell(), math.prod(shape)
    if start + count * dtype.itemsize > len(buffer):
        raise WeightError(f"{where}: its header declares {dtype}{list(shape)} "
                          f"({count * dtype.itemsize} bytes), it holds {len(buffer) - start}")
    flat = np.frombuffer(buffer, dtype, count=count, offset=start) if count \
        else np.frombuffer(b"", dtype)
    array = flat.reshape(shape, order="F" if fortran else "C")
    return SourceTensors(dense={path.stem: check_dense(array, path.stem, path)})


def read_npz(path: Path) -> SourceTensors:
    buffer = map_file(path, WeightError).buffer
    with reading(path, ".npz", *_LOAD_ERRORS):
        archive = np.load(io.BytesIO(buffer), allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise WeightError(f"{path} is an .npy file, not an .npz archive")
        with archive:
            assert archive.zip is not None  # an open NpzFile has its zip
            infos = archive.zip.infolist()
            _check_directory(infos, len(buffer), path)
            for info in infos:
                _check_member(archive.zip, info, path)
            dense = {name: check_dense(archive[name], name, path) for name in archive.files}
    return SourceTensors(dense=dense)


def _check_directory(infos: list[zipfile.ZipInfo], size: int, path: Path) -> None:
    """Each member once: a central directory may list one member's bytes under many
    entries (or one name many times), which would make reading cost entries x member
    size. Names and offsets must be distinct and the members' compressed sizes fit in
    the archive, so the total inflated is bounded by the archive's size x deflate's ratio."""
    names, offsets, total = set(), set(), 0
    for info in infos:
        if info.filename in names or info.header_offset in offsets:
            raise WeightError(f"corrupt .npz file {path}: member {info.filename!r} at offset "
                              f"{info.header_offset} is listed twice in the central directory")
        names.add(info.filename)
        offsets.add(info.header_offset)
        total += info.compress_size
    if total > size:
        raise WeightError(f"corrupt .npz file {path}: its members claim {total} compressed "
                          f"bytes, the archive holds {size}")


def _read_header(stream) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(stream)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) \
        else np.lib.format.read_array_header_2_0
    return read(stream)


def _check_shape(shape: tuple[int, ...], where: str) -> None:
    if len(shape) > _MAX_RANK or math.prod(max(d, 1) for d in shape) >= 2**62:
        raise WeightError(f"{where}: shape {list(shape)} is more than an array can hold")


def _check_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> None:
    """The member's `.npy` header describes exactly the bytes it holds, and those fit what
    its compressed size can inflate to; only then may numpy allocate the array."""
    where = f"corrupt .npz file {path}: member {info.filename!r}"
    if info.flag_bits & 0x1:
        raise WeightError(f"{where} is encrypted")
    ratio = _DEFLATE_MAX_RATIO if info.compress_type == zipfile.ZIP_DEFLATED else 1
    if info.file_size > info.compress_size * ratio:
        raise WeightError(f"{where} claims {info.file_size} bytes from {info.compress_size}")
    with archive.open(info) as member:
        _header_length(member, where)
        member.seek(0)
        shape, _, dtype = _read_header(member)
        header = member.tell()
    if dtype.hasobject:
        raise WeightError(f"{where} holds Python objects, which only a pickle can load "
                          "(rlx loads with allow_pickle=False)")
    _check_shape(shape, where)
    nbytes = math.prod(shape) * dtype.itemsize
    if header + nbytes != info.file_size:
        raise WeightError(f"{where}: its header declares {dtype}{list(shape)} "
                          f"({nbytes} bytes), it holds {info.file_size - header}")


def _header_length(stream, where: str) -> None:
    """Refuse an .npy header longer than numpy accepts, before numpy reads it."""
    version = np.lib.format.read_magic(stream)
    width = 2 if version == (1, 0) else 4
    length = int.from_bytes(stream.read(width), "little")
    if length > _MAX_HEADER_BYTES:
        raise WeightError(f"{where}: .npy header of {length} bytes (at most "
                          f"{_MAX_HEADER_BYTES})")
