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


def _cache(root, *levels):
    for i, (level, kind, size) in enumerate(levels):
        folder = root / f"index{i}"
        folder.mkdir()
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (folder / name).write_text(text + "\n")
    (root / "uevent").write_text("")  # sysfs keeps files beside the index folders
    return str(root)


def test_blocks_are_sized_to_the_l2_cache(tmp_path):
    base = _cache(tmp_path, ("1", "Data", "48K"), ("1", "Instruction", "64K"),
                  ("2", "Unified", "2048K"), ("3", "Unified", "491520K"))
    assert bw._l2_bytes(base) == 2 << 20
    assert bw._block_elements(2 << 20) == 131072  # four float32 buffers fill 2 MiB
    assert bw._block_elements(512 << 10) == 32768
    assert bw._block_elements(64 << 20) == 262144  # at most 1 MiB a buffer


def test_an_unreadable_cache_keeps_the_default_block(tmp_path):
    assert bw._l2_bytes(str(tmp_path / "missing")) is None
    assert bw._l2_bytes(_cache(tmp_path, ("1", "Data", "32K"))) is None
    assert bw._block_elements(None) == 32768


def test_pool_threads_keep_the_callers_error_state():
    if parallel.MAX_WORKERS < 2:
        return
    seen = []

    def part(i):
        seen.append(np.geterr()["over"])

    with threadpool_limits(2), np.errstate(over="ignore"):
        parallel.run_parts(part, [(0,), (1,)])
    assert seen == ["ignore", "ignore"]
