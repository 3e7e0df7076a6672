"""Handing an array's bytes to a runtime without copying them: its address, a writeable
alias for APIs that insist on one, and the process's anonymous memory (what a copy would
grow). Engines point the runtime at the bytes the artifact already maps
(`RlxFile.origin`), never at the file."""

from __future__ import annotations

import ctypes

import numpy as np

__all__ = ["address_of", "writable_alias", "anon_rss_bytes"]


def address_of(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


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
