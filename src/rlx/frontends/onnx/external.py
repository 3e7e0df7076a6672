"""External tensor data: files next to the model, read through a memory map.

ONNX lets an initializer keep its bytes in another file (`location`, `offset`, `length`).
A model is untrusted input, so a location may only name a file inside the model's folder:
absolute paths, `..` components and symlinks that resolve outside the folder are refused
before anything is opened. Each file is mapped once, read-only; tensors are views into it.
"""

from __future__ import annotations

import math
import os
from pathlib import PurePosixPath, PureWindowsPath

import numpy as np

from rlx.errors import ModelImportError

__all__ = ["ExternalData"]


class ExternalData:
    """The external-data files of one model folder, each memory-mapped on first use."""

    def __init__(self, base_dir: str | None):
        self.base_dir = base_dir
        self._maps: dict[str, np.ndarray] = {}

    def resolve(self, location: str, what: str) -> str:
        """The real path of `location`, refused unless it stays inside the model's folder."""
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
        base = os.path.realpath(self.base_dir)
        path = os.path.realpath(os.path.join(base, location))
        if os.path.commonpath([base, path]) != base:
            raise ModelImportError(f"{what}: external data location {location!r} resolves "
                                   "outside the model's folder (through a symlink)")
        if not os.path.isfile(path):
            raise ModelImportError(f"{what}: external data file {location!r} does not exist")
        return path

    def read(self, entries: dict[str, str], dtype: np.dtype, shape: tuple[int, ...],
             what: str) -> np.ndarray:
        """The tensor described by the `external_data` key/value `entries`, as a view."""
        location = entries.get("location", "")
        path = self.resolve(location, what)
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
        whole = self._map(path)
        if offset < 0 or offset + nbytes > whole.size:
            raise ModelImportError(f"{what}: external data [{offset}, {offset + nbytes}) "
                                   f"runs past the end of {location!r} ({whole.size} bytes)")
        return whole[offset:offset + nbytes].view(dtype).reshape(shape)

    def _map(self, path: str) -> np.ndarray:
        whole = self._maps.get(path)
        if whole is None:
            if os.path.getsize(path) == 0:
                whole = np.zeros(0, np.uint8)
            else:
                whole = np.memmap(path, dtype=np.uint8, mode="r")
            self._maps[path] = whole
        return whole
