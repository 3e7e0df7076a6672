"""Large blockwise formulas split across the thread pool only as far as the caller's BLAS
thread limit allows, with results identical to one thread (each element is computed by
the same passes whichever thread runs its part)."""

from __future__ import annotations

import threading

import numpy as np
from threadpoolctl import threadpool_limits

from rlx.kernels import blockwise as bw
from rlx.kernels import parallel
from rlx.kernels.elementwise import _gelu, erf


def _recording(monkeypatch) -> set[int]:
    """The thread idents that run block loops while installed."""
    seen: set[int] = set()
    real = bw._blocks

    def spy(*args):
        seen.add(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(bw, "_blocks", spy)
    return seen


def test_one_thread_limit_keeps_the_work_on_the_caller(monkeypatch):
    seen = _recording(monkeypatch)
    x = np.random.default_rng(0).standard_normal(parallel.PARALLEL_MIN * 2, np.float32)
    with threadpool_limits(1):
        assert parallel.workers() == 1
        erf(x)
    assert seen == {threading.get_ident()}


def test_two_threads_split_large_work_and_agree_exactly(monkeypatch):
    if parallel.MAX_WORKERS < 2:
        return  # a one-core machine has no second thread to use
    x = np.random.default_rng(1).standard_normal(parallel.PARALLEL_MIN * 3 + 17, np.float32)
    with threadpool_limits(1):
        one = (erf(x), _gelu(x))
    seen = _recording(monkeypatch)
    with threadpool_limits(2):
        assert parallel.workers() == 2
        two = (erf(x), _gelu(x))
    assert len(seen) == 2  # the caller and one pool thread
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


def test_small_arrays_never_reach_the_pool(monkeypatch):
    seen = _recording(monkeypatch)
    x = np.random.default_rng(2).standard_normal(parallel.PARALLEL_MIN - 1, np.float32)
    with threadpool_limits(2):
        erf(x)
    assert seen == {threading.get_ident()}
