"""Where an array's bytes live: the file and offset a read-only memory map gives them.

Engines hand weights over without copying by pointing the runtime at the bytes the
artifact already maps: onnxruntime maps them itself from the `.rlx` file (external data at
the array's file offset), OpenVINO wraps the mapped address. `/proc/self/maps` says which
file region backs an address (Linux); elsewhere `FileRegions.offset` returns None and the
engines fall back to handing over the in-memory array.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

__all__ = ["FileRegions", "address_of", "writable_alias", "anon_rss_bytes"]


def address_of(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


class FileRegions:
    """The mappings of one file in this process, read once from /proc/self/maps."""

    def __init__(self, path: str):
        self.path = os.path.realpath(path)
        self.regions: list[tuple[int, int, int]] = []  # (start, end, file offset)
        try:
            st = os.stat(self.path)
            with open("/proc/self/maps") as f:
                lines = f.readlines()
        except OSError:
            return
        for line in lines:
            parts = line.split(None, 5)
            if len(parts) < 6:
                continue
            inode = int(parts[4])
            if inode != st.st_ino or os.path.realpath(parts[5].strip()) != self.path:
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            self.regions.append((start, end, int(parts[2], 16)))

    def offset(self, array: np.ndarray) -> int | None:
        """The file offset of `array`'s bytes when a mapping of the file holds all of them."""
        if not array.flags.c_contiguous:
            return None
        addr = address_of(array)
        for start, end, file_offset in self.regions:
            if start <= addr and addr + array.nbytes <= end:
                return addr - start + file_offset
        return None

    def contains(self, addr: int) -> bool:
        return any(start <= addr < end for start, end, _ in self.regions)


def writable_alias(array: np.ndarray) -> np.ndarray:
    """A writeable ndarray over the same bytes (no copy), for APIs that insist on writeable
    buffers but only read them (OpenVINO's shared-memory Constant). Writing to it would
    fault on a read-only map; keep `array` alive as long as the alias."""
    if array.flags.writeable or array.nbytes == 0:
        return array
    buf = (ctypes.c_char * array.nbytes).from_address(address_of(array))
    return np.frombuffer(memoryview(buf), dtype=array.dtype).reshape(array.shape)


def anon_rss_bytes() -> int:
    """This process's anonymous resident memory (RssAnon), 0 where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
