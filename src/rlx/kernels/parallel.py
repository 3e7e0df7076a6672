"""A small persistent thread pool for large elementwise work (NumPy releases the GIL).

BLAS already spreads GEMMs (convolutions, matmuls) over its threads; the passes NumPy runs
between them (activations, erf, sigmoid, ...) run on one core. A formula over a large
array is split into contiguous parts, one per thread, the caller's thread taking the first.

How many threads: the BLAS thread limit in force now (what `threadpoolctl` or a caller's
`--threads` set: `threadpool_limits(1)` means no helper threads), at most `MAX_WORKERS`.
The limit is read through threadpoolctl's BLAS controller, found on the first large call
(~2 ms once; small models never pay it) and then ~1 us a call. Handing a part to a worker
costs ~20-50 us, so only arrays of `PARALLEL_MIN` elements or more are split.
"""

from __future__ import annotations

import _thread
import contextvars
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["MAX_WORKERS", "PARALLEL_MIN", "run_parts", "workers"]

PARALLEL_MIN = 1 << 18
"""Elements below which a formula runs on the caller's thread alone (a part of 128k
float32 values costs ~10x the handoff through 20 passes)."""

MAX_WORKERS = max(1, min(8, os.cpu_count() or 1))

_lock = _thread.allocate_lock()  # not `threading`: a load imports no more than it uses
_pool: ThreadPoolExecutor | None = None
_limit: Callable[[], int] | None = None


def _blas_limit() -> Callable[[], int]:
    """A function giving the BLAS thread limit now (1 when no BLAS controller is found)."""
    try:
        import threadpoolctl

        controllers = [c for c in threadpoolctl.ThreadpoolController().lib_controllers
                       if c.user_api == "blas"]
    except (ImportError, OSError, RuntimeError, AttributeError):  # no BLAS control here
        controllers = []
    if not controllers:
        return lambda: 1
    return controllers[0].get_num_threads


def workers() -> int:
    """Threads a large elementwise formula may use now (1: the caller's alone)."""
    global _limit
    if MAX_WORKERS == 1:
        return 1
    if _limit is None:
        with _lock:
            if _limit is None:
                _limit = _blas_limit()
    return max(1, min(MAX_WORKERS, int(_limit() or 1)))


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        from concurrent.futures import ThreadPoolExecutor  # on first use: ~5 ms of imports

        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(MAX_WORKERS - 1, thread_name_prefix="rlx")
    return _pool


def run_parts(fn: Callable[..., Any], parts: Sequence[tuple]) -> None:
    """`fn(*part)` for every part: the first on this thread, the others on the pool, each
    in a copy of the caller's context (NumPy keeps `np.errstate` there: a run's "ignore"
    holds in the pool too); returns when all are done (re-raising the first error)."""
    if len(parts) == 1:
        fn(*parts[0])
        return
    pool = _executor()
    futures = [pool.submit(contextvars.copy_context().run, fn, *part) for part in parts[1:]]
    try:
        fn(*parts[0])
    finally:
        for future in futures:
            future.result()
