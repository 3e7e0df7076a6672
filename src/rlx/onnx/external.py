"""External tensor data: files next to the model, read through a memory map.

ONNX lets an initializer keep its bytes in another file (`location`, `offset`, `length`).
A model is untrusted input, so a location may only name a file inside the model's folder:
absolute paths and `..` components are refused before anything is opened, and the file is
then opened once, one component at a time from a descriptor of the folder, each with
`O_NOFOLLOW`: no symlink is followed, so what is opened is inside the folder whatever
another process renames or links meanwhile (a check of the path followed by an open by
name could be raced: 392 of 73,822 racing imports read a file outside). The descriptor is
then checked (`fstat`: a regular file) and mapped once under a read lease
(`rlx.safeio.mapping`); tensors are views into it.
"""

from __future__ import annotations

import math
import os
from pathlib import PurePosixPath, PureWindowsPath

import numpy as np

from rlx.errors import ModelImportError
from rlx.safeio import map_fd, open_regular

__all__ = ["ExternalData"]


class ExternalData:
    """The external-data files of one model folder, each memory-mapped on first use."""

    def __init__(self, base_dir: str | None, dense_budget: int | None = None):
        self.base_dir = base_dir
        self._maps: dict[str, np.ndarray] = {}
        self.dense_budget = dense_budget  # bytes sparse tensors may still densify to

    def spend_dense(self, nbytes: int, what: str) -> None:
        """Charge `nbytes` of densified sparse data to the model's budget, or refuse."""
        if self.dense_budget is None:
            return
        if nbytes > self.dense_budget:
            raise ModelImportError(f"{what}: densifies to {nbytes} bytes, more than the "
                                   f"{self.dense_budget} bytes left for this model's sparse "
                                   "tensors (16x the model's size, at least 16 MiB)")
        self.dense_budget -= nbytes

    def check_location(self, location: str, what: str) -> tuple[str, ...]:
        """The components of `location`, refused unless it is relative and never climbs."""
        if self.base_dir is None:
            raise ModelImportError(f"{what}: external data {location!r} needs the model's "
                                   "folder; load the model from a path or pass base_dir")
        if not isinstance(location, str) or "\0" in location:  # protobuf: bytes if not UTF-8
            raise ModelImportError(f"{what}: external data location {location!r} is no file name")
        posix, windows = PurePosixPath(location), PureWindowsPath(location)
        if not location or posix.is_absolute() or windows.is_absolute() or windows.drive:
            raise ModelImportError(f"{what}: external data location {location!r} is an "
                                   "absolute path; it must be relative to the model's folder")
        if ".." in posix.parts or ".." in windows.parts:
            raise ModelImportError(f"{what}: external data location {location!r} contains "
                                   "'..'; it must stay inside the model's folder")
        parts = tuple(p for p in posix.parts if p != ".")
        if not parts:
            raise ModelImportError(f"{what}: external data location {location!r} is no file name")
        return parts

    def open(self, location: str, what: str) -> int:
        """A descriptor of the regular file `location` names inside the model's folder,
        opened component by component without following any symlink."""
        parts = self.check_location(location, what)
        assert self.base_dir is not None
        try:
            folder = os.open(self.base_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            raise ModelImportError(f"{what}: cannot open the model's folder "
                                   f"{self.base_dir}: {err.strerror or err}") from None
        try:
            for part in parts[:-1]:
                try:
                    inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                    | os.O_CLOEXEC, dir_fd=folder)
                except OSError as err:
                    raise ModelImportError(_refusal(what, location, err)) from None
                os.close(folder)
                folder = inner
            try:
                return open_regular(parts[-1], _Refused, nofollow=True, dir_fd=folder)
            except _Refused as err:
                raise ModelImportError(f"{what}: external data {location!r}: {err}") from None
        finally:
            os.close(folder)

    def read(self, entries: dict[str, str], dtype: np.dtype, shape: tuple[int, ...],
             what: str) -> np.ndarray:
        """The tensor described by the `external_data` key/value `entries`, as a view."""
        location = entries.get("location", "")
        self.check_location(location, what)
        try:
            offset = int(entries.get("offset", 0))
            length = int(entries["length"]) if "length" in entries else None
        except ValueError:
            raise ModelImportError(
                f"{what}: external data offset/length are not integers") from None
        nbytes = math.prod(shape) * dtype.itemsize  # Python ints: np.prod wraps at 2**63
        if length is not None and length != nbytes:
            raise ModelImportError(f"{what}: external data length is {length} bytes, "
                                   f"shape {list(shape)} of {dtype} needs {nbytes}")
        whole = self._map(location, what)
        if offset < 0 or offset + nbytes > whole.size:
            raise ModelImportError(f"{what}: external data [{offset}, {offset + nbytes}) "
                                   f"runs past the end of {location!r} ({whole.size} bytes)")
        return whole[offset:offset + nbytes].view(dtype).reshape(shape)

    def _map(self, location: str, what: str) -> np.ndarray:
        key = "/".join(self.check_location(location, what))
        whole = self._maps.get(key)
        if whole is None:
            mapped = map_fd(self.open(location, what), location, _Refused)
            whole = np.frombuffer(mapped.buffer, np.uint8) if len(mapped) \
                else np.zeros(0, np.uint8)
            self._maps[key] = whole
        return whole


class _Refused(ModelImportError):
    """A file-level refusal, reworded with the tensor it was for."""


def _refusal(what: str, location: str, err: OSError) -> str:
    if err.errno in (getattr(os, "ELOOP", 40), getattr(os, "ENOTDIR", 20)):
        return (f"{what}: external data location {location!r} goes through a symbolic link "
                "or a non-folder; it must name a regular file inside the model's folder")
    return f"{what}: cannot open external data {location!r}: {err.strerror or err}"
