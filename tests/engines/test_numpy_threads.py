"""The numpy engine's `threads`: BLAS's pool runs at that count while a run lasts and is
put back after, set only where it differs (a run that finds it set makes no call), and
only as many as fit on the cores that other runnable threads leave free
(`cores.threads_that_fit`, read from a fake /proc/loadavg here)."""

from __future__ import annotations

import numpy as np
import pytest
import threadpoolctl

import rlx
from rlx.engines import cores
from rlx.kernels import parallel


def _pools() -> list:
    return threadpoolctl.ThreadpoolController().lib_controllers


def _machine(tmp_path, monkeypatch, n_cores: int, running: int) -> None:
    """`n_cores` in the affinity mask and `running` runnable threads (the loading one
    included) in every read of the kernel's load line."""
    path = tmp_path / "loadavg"
    path.write_text(f"0.00 0.00 0.00 {running}/300 4242\n")
    monkeypatch.setattr(cores, "PROC_LOADAVG", str(path))
    monkeypatch.setattr(cores, "sleep", lambda _gap: None)
    monkeypatch.setattr(cores, "usable_cores", lambda: n_cores)


@pytest.mark.parametrize(("threads", "n_cores", "load", "fit"), [
    (2, 2, 0.0, 2),  # the cores are free
    (2, 2, 0.5, 1),  # half a core taken: one thread is all that fits
    (2, 2, 4.0, 1),  # never fewer than one
    (None, 2, 0.0, None),  # the pool's own default (one per core) stands
    (None, 2, 3.0, 1),
    (4, 8, 5.0, 3),  # three free cores of eight
    (None, 8, 5.5, 2),
    (3, 2, 0.0, 2),  # more threads than cores: the cores
    (1, 2, 10.0, 1),
])
def test_threads_that_fit_leave_the_others_their_cores(threads, n_cores, load, fit):
    assert cores.threads_that_fit(threads, n_cores, load) == fit


@pytest.mark.parametrize(("threads", "running", "used"), [
    (2, 1, 2),  # alone on two cores
    (2, 3, 1),  # two CPU-bound neighbours
    (None, 3, 1),  # the default is one thread per core: it gives way too
])
def test_a_run_uses_the_threads_that_fit(mlp, tmp_path, monkeypatch, threads, running, used):
    """BLAS and rlx's parallel kernels both run at the count the rule leaves; the output is
    the float64 reference's either way."""
    _machine(tmp_path, monkeypatch, 2, running)
    model = rlx.load(mlp.path, engine="numpy", threads=threads)
    pools = model.runner.pools
    seen: list[tuple[list[int], int]] = []
    call = model.runner.compiled.call
    monkeypatch.setattr(model.runner.compiled, "call", lambda *args: seen.append(
        ([p.num_threads for p in pools if p.user_api == "blas"], parallel.workers()))
        or call(*args))
    x = np.ones((2, 64), np.float32)
    want = np.maximum(x.astype(np.float64) @ mlp.w1 + mlp.b1, 0)
    np.testing.assert_allclose(model.run({"x": x})[0], want, rtol=1e-5, atol=1e-5)
    assert model.runner.threads == used
    assert seen == [([used], used)]


def test_a_run_sets_the_pools_to_its_threads_and_puts_them_back(mlp, tmp_path, monkeypatch):
    _machine(tmp_path, monkeypatch, 8, 1)  # room for any count the test picks
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


def test_a_run_that_finds_its_count_set_changes_nothing(mlp, tmp_path, monkeypatch):
    _machine(tmp_path, monkeypatch, 8, 1)
    pools = _pools()
    threads = pools[0].num_threads
    model = rlx.load(mlp.path, engine="numpy", threads=threads)
    sets: list[int] = []
    for pool in model.runner.pools:
        monkeypatch.setattr(pool, "set_num_threads", sets.append)
    model.run({"x": np.ones((1, 64), np.float32)})
    assert sets == []
