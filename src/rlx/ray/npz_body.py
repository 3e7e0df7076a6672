"""An `.npz` request body to arrays, checked before anything is unpacked or allocated.

`np.load` trusts the archive: a member stored with a compression method zipfile does not
know raises `NotImplementedError`, the encryption flag `RuntimeError`, and a `.npy`
header claiming 4 TiB makes numpy allocate the array its header describes before a byte
of it is read. Here every member must be deflated or stored, unencrypted, named
`NAME.npy`, and hold exactly the bytes its header's shape and dtype need; the members'
unpacked sizes together may not exceed `limit`. Anything else is a `RequestError`.
"""

from __future__ import annotations

import io
import math
import struct
import zipfile
import zlib
from typing import IO

import numpy as np

from rlx.ray.errors import RequestError

__all__ = ["npz_arrays"]

_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
_ENCRYPTED = 0x1  # general purpose flag bit 0
_BROKEN = (ValueError, OSError, EOFError, zipfile.BadZipFile, NotImplementedError,
           RuntimeError, zlib.error, struct.error, KeyError)


def npz_arrays(body: bytes, limit: int) -> dict[str, np.ndarray]:
    """The arrays of an .npz body by name (RequestError, 413 past `limit`, else 400)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(body))
    except _BROKEN:
        raise RequestError("the body is not an .npz archive (np.savez writes one)") from None
    with archive:
        members = archive.infolist()
        for member in members:
            _check_member(member)
        claimed = sum(member.file_size for member in members)
        if claimed > limit:
            raise RequestError(f"the .npz archive unpacks to {claimed:,} bytes, more than the "
                               f"{limit:,} a request may hold", 413)
        arrays: dict[str, np.ndarray] = {}
        for member in members:
            name = member.filename.removesuffix(".npy")
            if name in arrays:
                raise RequestError(f"the .npz archive holds {member.filename!r} twice")
            try:
                with archive.open(member) as stream:
                    arrays[name] = _read_member(stream, member)
            except _BROKEN as err:
                raise RequestError(f"cannot read {member.filename!r} of the .npz archive: "
                                   f"{' '.join(str(err).split())[:200]}") from None
    return arrays


def _check_member(member: zipfile.ZipInfo) -> None:
    where = f"member {member.filename!r} of the .npz archive"
    if not member.filename.endswith(".npy"):
        raise RequestError(f"{where} is not an .npy array (np.savez names them NAME.npy)")
    if member.flag_bits & _ENCRYPTED:
        raise RequestError(f"{where} is encrypted; send plain arrays")
    if member.compress_type not in _METHODS:
        raise RequestError(f"{where} uses compression method {member.compress_type}; "
                           "only stored or deflated (np.savez, np.savez_compressed) are read")


def _read_member(stream: IO[bytes], member: zipfile.ZipInfo) -> np.ndarray:
    """One `.npy` member, its header's claim checked against the member's size first."""
    version = np.lib.format.read_magic(stream)
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise ValueError(f"unknown .npy format version {version}")
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    if dtype.hasobject:
        raise ValueError("it holds Python objects (pickles), which are refused")
    need = math.prod(shape) * dtype.itemsize
    have = member.file_size - stream.tell()
    if need != have:
        raise ValueError(f"its header claims {dtype}{list(shape)} ({need:,} bytes) but the "
                         f"member holds {have:,}")
    data = bytearray(need)
    view, done = memoryview(data), 0
    while done < need:
        got = stream.readinto(view[done:])  # type: ignore[attr-defined]  # ZipExtFile's
        if not got:
            raise ValueError(f"it ends after {done:,} of {need:,} bytes")
        done += got
    return np.frombuffer(data, dtype).reshape(shape, order="F" if fortran else "C")
