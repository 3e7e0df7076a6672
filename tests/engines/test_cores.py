"""onnxruntime's spinning rule: off when the process shares its cores, set on the session
rlx builds (read back from onnxruntime's own session options)."""

from __future__ import annotations

import hashlib
import threading

import numpy as np
import pytest

import rlx
from rlx.engines import cores
from rlx.engines import onnxruntime_engine as ort_engine
from tests.engines.conftest import feeds, require, write_mlp


@pytest.mark.parametrize(("threads", "n_cores", "load", "spins"), [
    (2, 2, 0.0, True),  # the process has its two cores to itself
    (2, 2, 0.5, False),  # half a core taken by others: the threads no longer fit
    (2, 4, 2.0, True),
    (3, 2, 0.0, False),  # more threads than cores: workers share them with each other
    (None, 4, 0.0, True),  # onnxruntime's default: one thread per core
    (None, 4, 1.5, False),
    (1, 2, 10.0, True),  # no worker threads: nothing spins either way
])
def test_spinning_pays_only_when_the_threads_fit_on_free_cores(threads, n_cores, load, spins):
    assert cores.spinning_pays(threads, n_cores, load) is spins


def _loadavg(tmp_path, monkeypatch, *running: int, minute: float = 0.0) -> list[int]:
    """The kernel's load line as `cores` reads it: the runnable count of each read in turn
    (the last one repeated), beside a one-minute average of `minute`; the counts written
    (one per read) are listed in the list returned. Time moves only by the sleeps between
    reads: a read the machine delays spans no gap (`others_load` sleeps what is left)."""
    path = tmp_path / "loadavg"
    counts, written, now = iter(running), [], [0.0]

    def write(gap: float = 0.0) -> None:
        now[0] += gap
        written.append(next(counts, running[-1]))
        path.write_text(f"{minute:.2f} {minute:.2f} {minute:.2f} {written[-1]}/300 4242\n")

    write()
    monkeypatch.setattr(cores, "PROC_LOADAVG", str(path))
    monkeypatch.setattr(cores, "sleep", write)
    monkeypatch.setattr(cores, "monotonic", lambda: now[0])
    quiet = tmp_path / "no-other-threads"  # this process's own threads: none running
    quiet.mkdir(exist_ok=True)
    monkeypatch.setattr(cores, "PROC_TASKS", str(quiet))
    return written


def test_the_rule_reads_the_affinity_mask_and_the_runnable_threads_now(tmp_path,
                                                                      monkeypatch):
    """The runnable count includes the loading thread itself: one runnable thread on a
    two-core mask leaves both cores free; two CPU-bound neighbours take them."""
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    _loadavg(tmp_path, monkeypatch, 1)
    assert cores.usable_cores() == 2 and cores.spinning_pays(2)
    _loadavg(tmp_path, monkeypatch, 3)
    assert cores.others_load() == 2.0 and not cores.spinning_pays(2)


def test_a_lagging_average_of_work_that_is_gone_leaves_spinning_on(tmp_path, monkeypatch):
    """A process started just after another ended sees a one-minute average of 2 on free
    cores: the count of runnable threads now decides."""
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    _loadavg(tmp_path, monkeypatch, 1, minute=2.0)
    assert cores.spinning_pays(2)


def test_a_bursty_neighbour_counts_when_it_runs_in_half_the_reads(tmp_path, monkeypatch):
    """The median of reads over some milliseconds: a neighbour runnable in half of them is
    half a thread (threads 2 + 0.5 on 2 cores: spinning off)."""
    _loadavg(tmp_path, monkeypatch, *[1, 2] * (cores.SAMPLES // 2))
    assert cores.others_load() == pytest.approx(0.5)
    assert not cores.spinning_pays(2, cores=2)


@pytest.mark.parametrize("running", [[2, 2, 1], [2, 1, 1, 1, 2, 1], [1, 2, 1]])
def test_a_blip_in_a_few_reads_is_no_neighbour(tmp_path, monkeypatch, running):
    """One other thread in one or two of the eight reads (a kernel thread, a process ending
    as this one starts) leaves the cores free: the mean of such reads turned spinning off
    in ~15% of fresh loads on a quiet machine."""
    written = _loadavg(tmp_path, monkeypatch, *running)
    assert cores.others_load() == 0.0 and len(written) == cores.SAMPLES
    assert cores.spinning_pays(2, cores=2)


@pytest.mark.parametrize(("running", "reads", "spins"), [
    ([1], cores.AGREE, True),  # quiet: the first reads agree that both cores are free
    ([3], cores.AGREE, False),  # two CPU-bound neighbours in every read
    ([1, 1, 2], cores.SAMPLES, False),  # a neighbour from the third read on: all are taken
    ([2, 1], cores.SAMPLES, True),  # a neighbour in the first read alone: a blip
])
def test_first_reads_that_agree_decide_alone(tmp_path, monkeypatch, running, reads, spins):
    """A steady load is read `AGREE` times, 2 gaps rather than 7; reads that disagree
    are all taken, and their median decides."""
    written = _loadavg(tmp_path, monkeypatch, *running)
    assert cores.spinning_pays(2, cores=2) is spins
    assert len(written) == reads


def test_without_the_kernels_count_the_one_minute_average_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(cores, "PROC_LOADAVG", str(tmp_path / "missing"))
    monkeypatch.setattr(cores.os, "getloadavg", lambda: (3.0, 3.0, 3.0))
    assert cores.others_load() == 2.0


def _spinning_entry(model) -> str | None:
    options = model.runner.session.get_session_options()
    try:
        return options.get_session_config_entry(ort_engine.SPINNING_KEY)
    except RuntimeError:  # onnxruntime raises for an entry never set
        return None


@pytest.mark.parametrize("prepack", ["mapped", "off"])
def test_sessions_follow_the_rule(tmp_path, monkeypatch, prepack):
    """Both ways a session is made (over the saved prepacked model, and over the export)
    carry the rule's setting; spinning stays onnxruntime's default when it pays."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    for running, expected in ((3, "0"), (1, None)):
        _loadavg(tmp_path, monkeypatch, running)
        monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
        model = rlx.load(mlp.path, engine="onnxruntime", threads=2,
                         cache_dir=tmp_path / "cache", prepack=prepack)
        assert _spinning_entry(model) == expected


@pytest.mark.parametrize("precision", ["exact", "fast"])
def test_openvino_threads_are_left_to_the_scheduler(tmp_path, precision):
    """OpenVINO's CPU plugin pins its threads to cores by default on Linux, where a process
    sharing those cores halved its speed (`openvino_engine.UNPINNED`): rlx's engine compiles
    unpinned at every precision, and still matches the MLP's float64 reference."""
    require("openvino")
    mlp = write_mlp(tmp_path / "mlp.rlx")
    model = rlx.load(mlp.path, engine="openvino", precision=precision, threads=1)
    assert model.runner.compiled.get_property("ENABLE_CPU_PINNING") is False
    x = feeds()
    for got, want in zip(model.run(x), mlp.oracle(x["x"]), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-2 if precision == "fast" else 1e-4,
                                   atol=2e-2 if precision == "fast" else 1e-5)


def _tasks(tmp_path, monkeypatch, states: dict[str, str]) -> None:
    """A fake /proc/self/task: one folder per thread id with its stat line's state; the
    calling thread is runnable, as it is while reading."""
    for tid, state in {str(threading.get_native_id()): "R", **states}.items():
        (tmp_path / tid).mkdir(exist_ok=True)
        (tmp_path / tid / "stat").write_text(f"{tid} (a) R (b) {state} 1 1 1 0 -1\n")
    monkeypatch.setattr(cores, "PROC_TASKS", str(tmp_path))


def test_settle_waits_until_the_other_threads_park(tmp_path, monkeypatch):
    """A worker that spins for three waits, then sleeps; a command name that holds ") R "
    is not a state; the caller's own thread is left out."""
    _tasks(tmp_path, monkeypatch, {"9001": "R", "9002": "S"})
    now, naps = [0.0], []

    def nap(seconds: float) -> None:
        now[0] += seconds
        naps.append(seconds)
        if len(naps) == 3:
            _tasks(tmp_path, monkeypatch, {"9001": "S"})

    monkeypatch.setattr(cores, "sleep", nap)
    monkeypatch.setattr(cores, "monotonic", lambda: now[0])
    assert cores.running_threads() == {"9001"}
    assert cores.settle() == set()
    # three steps until it parked, then a rest of SETTLE_REST times that wait
    assert naps == pytest.approx([cores.SETTLE_STEP_S] * 3
                                 + [cores.SETTLE_REST * 3 * cores.SETTLE_STEP_S])
    naps.clear()
    assert cores.running_threads() == set() and cores.settle() == set() and not naps


def test_settle_names_the_threads_that_never_park(tmp_path, monkeypatch):
    """A wait runs out on a thread that keeps running and names it; told to leave it out,
    the next wait does not wait at all."""
    _tasks(tmp_path, monkeypatch, {"9001": "R", "9002": "S"})
    now, naps = [0.0], []

    def nap(seconds: float) -> None:
        now[0] += seconds
        naps.append(seconds)

    monkeypatch.setattr(cores, "sleep", nap)
    monkeypatch.setattr(cores, "monotonic", lambda: now[0])
    assert cores.settle() == {"9001"}
    steps = cores.SETTLE_S / cores.SETTLE_STEP_S
    assert steps - 1 <= len(naps) <= steps + 1
    naps.clear()
    assert cores.settle(frozenset({"9001"})) == set() and not naps


def test_running_threads_sees_a_thread_of_this_process_run_then_park():
    """A thread hashing outside the GIL is running or runnable; once it waits on an event,
    it is parked."""
    stop, parked = threading.Event(), threading.Event()

    def work() -> None:
        data = bytes(1 << 22)
        while not stop.is_set():
            hashlib.sha256(data)  # releases the GIL for data this long
        parked.wait()

    worker = threading.Thread(target=work)
    worker.start()
    try:
        assert any(str(worker.native_id) in cores.running_threads() for _ in range(200))
    finally:
        stop.set()
    assert cores.settle() == set()
    assert cores.running_threads() == set()
    parked.set()
    worker.join()


def test_this_process_s_own_running_threads_are_no_neighbours(tmp_path, monkeypatch):
    """The kernel's runnable count holds this process's threads too (numpy's BLAS workers
    spin after each call): only the others' count against spinning."""
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    _loadavg(tmp_path, monkeypatch, 2)  # the loading thread and its running worker 101
    _tasks(tasks, monkeypatch, {"101": "R", "102": "S"})
    assert cores.others_load() == 0.0 and cores.spinning_pays(2)
    _loadavg(tmp_path, monkeypatch, 4)  # and two threads of other processes
    _tasks(tasks, monkeypatch, {"101": "R", "102": "S"})
    assert cores.others_load() == 2.0 and not cores.spinning_pays(2)
