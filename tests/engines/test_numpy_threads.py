"""The numpy engine's `threads`: BLAS's pool runs at that count while a run lasts and is
put back after, set only where it differs (a run that finds it set makes no call)."""

from __future__ import annotations

import numpy as np
import threadpoolctl

import rlx


def _pools() -> list:
    return threadpoolctl.ThreadpoolController().lib_controllers


def test_a_run_sets_the_pools_to_its_threads_and_puts_them_back(mlp, monkeypatch):
    pools = _pools()
    assert pools, "numpy's BLAS is not found by threadpoolctl"
    before = [pool.num_threads for pool in pools]
    threads = before[0] + 1  # differs from what the process has
    model = rlx.load(mlp.path, engine="numpy", threads=threads)
    seen: list[list[int]] = []
    call = model.runner.compiled.call
    monkeypatch.setattr(model.runner.compiled, "call",
                        lambda *args: seen.append([p.num_threads for p in pools]) or call(*args))
    x = np.ones((2, 64), np.float32)
    want = np.maximum(x.astype(np.float64) @ mlp.w1 + mlp.b1, 0)  # the hidden layer
    np.testing.assert_allclose(model.run({"x": x})[0], want, rtol=1e-5, atol=1e-5)
    assert seen == [[threads] * len(pools)]
    assert [pool.num_threads for pool in pools] == before


def test_a_run_that_finds_its_count_set_changes_nothing(mlp, monkeypatch):
    pools = _pools()
    threads = pools[0].num_threads
    model = rlx.load(mlp.path, engine="numpy", threads=threads)
    sets: list[int] = []
    for pool in model.runner._pools:
        monkeypatch.setattr(pool, "set_num_threads", sets.append)
    model.run({"x": np.ones((1, 64), np.float32)})
    assert sets == []
