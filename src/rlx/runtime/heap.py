"""Keep the memory a run frees for the next run, instead of handing it back to the OS.

A run allocates and frees the same tensors every time. glibc serves a request above its
mmap threshold (128 KiB at start) with fresh pages and gives the heap's top back to the OS
once more than its trim threshold is free, so every run page-faults its tensors in again:
400-2,000 faults per run on the MODELS.md models, and up to 40% of a small CNN's CPU time
(ppocr-cls at one thread). onnxruntime keeps an arena for the same reason. Two glibc
settings give the numpy engine one: requests up to `MMAP_THRESHOLD` come from the heap, and
up to `TRIM_THRESHOLD` of free heap stays mapped. Larger tensors still get, and return,
mappings of their own.

Why: a run's speed should not depend on whether the OS took its pages back. When: the
settings are process-wide, as an arena is; they are made once, when the first graph is
compiled with `Session(keep_heap=True)` (the default). `Session(keep_heap=False)` leaves
the allocator as it is: for a process that embeds rlx beside code of its own that tunes
malloc, or that must hand memory back between rare runs. Other C libraries (musl, macOS)
have no such settings: nothing changes there.
"""

from __future__ import annotations

import os

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory", "release_free_heap"]

MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for the threshold it adapts by itself
TRIM_THRESHOLD = 256 << 20

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
_settled = False
_libc: list = []  # the C library, once loaded (glibc only)


def keep_freed_memory() -> None:
    """Make the settings, once per process (a repeated call does nothing)."""
    global _settled
    if _settled:
        return
    _settled = True
    if not _is_glibc():
        return
    mallopt = _c_library().mallopt
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def release_free_heap() -> None:
    """Hand the heap's free pages back to the OS now, once, whatever the settings.

    Why: building a graph frees its temporaries (the parsed header, the plan's records)
    into a heap the settings keep, where nothing uses them until a run: a load's anonymous
    growth was its peak, not what it keeps (nudenet-320n: +0.26 MiB, 2% of its weights).
    When: at the end of a compile (`CompiledGraph`), before any run of the graph; a model
    run earlier faults its freed tensors in once more on its next run."""
    if _settled and _is_glibc():
        _c_library().malloc_trim(0)


def _c_library():
    if not _libc:
        import ctypes  # numpy has imported it already

        _libc.append(ctypes.CDLL(None))
    return _libc[0]


def _is_glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (AttributeError, ValueError, OSError):  # no confstr, or no such name here
        return False
