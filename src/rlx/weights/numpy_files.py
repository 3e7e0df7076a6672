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

import math
import tokenize
import zipfile
import zlib
from pathlib import Path

import numpy as np

from rlx.errors import WeightError
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


def read_npy(path: Path) -> SourceTensors:
    with reading(path, ".npy", *_LOAD_ERRORS):
        with path.open("rb") as f:
            if f.read(6) == np.lib.format.MAGIC_PREFIX:
                f.seek(0)
                _header_length(f, f"corrupt .npy file {path}")
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    if not isinstance(array, np.ndarray):
        array.close()
        raise WeightError(f"{path} is an .npz archive, not an .npy file")
    return SourceTensors(dense={path.stem: check_dense(array.view(np.ndarray), path.stem, path)})


def read_npz(path: Path) -> SourceTensors:
    with reading(path, ".npz", *_LOAD_ERRORS):
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise WeightError(f"{path} is an .npy file, not an .npz archive")
        with archive:
            assert archive.zip is not None  # an open NpzFile has its zip
            for info in archive.zip.infolist():
                _check_member(archive.zip, info, path)
            dense = {name: check_dense(archive[name], name, path) for name in archive.files}
    return SourceTensors(dense=dense)


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
        version = np.lib.format.read_magic(member)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) \
            else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(member)
        header = member.tell()
    if dtype.hasobject:
        raise WeightError(f"{where} holds Python objects, which only a pickle can load "
                          "(rlx loads with allow_pickle=False)")
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
