"""Helpers for the weight reader tests: is an array memory-mapped, raw safetensors bytes."""

from __future__ import annotations

import json
import mmap

import numpy as np


def is_mapped(array: np.ndarray) -> bool:
    """True when `array` is a view whose buffer chain ends in a memory map (not owned RAM)."""
    base = array
    while base is not None:
        if isinstance(base, (np.memmap, mmap.mmap)):
            return True
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return False


def raw_safetensors(header: object, data: bytes = b"", header_len: int | None = None) -> bytes:
    """Safetensors bytes with any header (valid or not; JSON text, bytes, or an object)."""
    text = header if isinstance(header, (bytes, str)) else json.dumps(header)
    body = text.encode() if isinstance(text, str) else text
    size = len(body) if header_len is None else header_len
    return size.to_bytes(8, "little") + body + data
