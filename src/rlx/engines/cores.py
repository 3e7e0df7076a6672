"""Whether this process has its cores to itself: the rule behind onnxruntime's spinning.

onnxruntime's intra-op worker threads spin (busy-wait) between parallel sections by
default, which saves a wake-up when the process owns its cores. When it shares them (its
threads plus the other runnable work exceed the cores it may use: other processes, other
workers of the same service), the spinning burns the time slices that the others, and
this process's own calling thread, need (docs/engines.md has the measurements). So rlx
turns spinning off when, at load, `threads` plus the other runnable threads exceed the
cores in the process's affinity mask. With one thread there are no workers and nothing to
decide.

numpy's BLAS (OpenBLAS) and rlx's own parallel kernels have no spinning switch, and each
of their calls waits until every one of its threads has run: beside other work, a call
waits for a descheduled worker. At load 5 on 2 cores, two threads ran a CRNN 10-40x and a
BERT encoder 5x slower than one. So the numpy engine runs at the threads that fit on the
free cores (`threads_that_fit`), at least one, read when it loads.

The other processes' runnable threads are counted (this process's own are not: numpy's
BLAS workers still spinning after a load's last call had turned spinning off on free
cores), now, not as the one-minute load average: that
average lags, so a process started just after another ended (a benchmark's fresh
processes, a restarted worker) saw a load that was gone and turned spinning off on free
cores: 1.3-1.9x slower on a 2 ms model at two threads. The kernel's count of runnable
threads is read a few times over some milliseconds and the median taken: a neighbour
runnable in half of the reads or more counts, a blip in one or two does not (a kernel
thread, a process ending as this one starts: on a quiet machine a lone read of one other
thread in eight made the mean 0.12-0.25, which turned spinning off in ~15% of fresh
loads, and int8 minilm-l3 ran 1.36x slower at two threads). When the first reads agree
(the load is steady) they decide, so a quiet or a busy machine costs a load 2 gaps (~4 ms)
rather than 7 (~14 ms).
`rlx.load` takes its first reads as it goes (`reads_ahead`: as it starts, and once the
file is open), so the parse, the checks and the compile fill those gaps rather than sleeps.

The same question inside the process: while auto times one engine, another engine's
threads may still run. numpy's BLAS workers (OpenBLAS) spin for about 0.1 s after each
call, and OpenVINO timed in that window ran 1.9-2.6x slower (onnxruntime 1.1-1.2x), a
bias no fresh process shows. `settle` waits until the process's other threads are parked.
"""

from __future__ import annotations

import _thread  # not `threading` (~60 KiB of code): a load imports no more than it uses
import functools
import os
from collections.abc import Callable
from contextlib import suppress
from contextvars import ContextVar
from time import monotonic, sleep
from typing import ParamSpec, TypeVar

__all__ = ["usable_cores", "others_load", "shares_cores", "spinning_pays", "SAMPLES",
           "SAMPLE_GAP_S", "AGREE", "READ_AGE_S", "reads_ahead", "read_ahead", "threads_that_fit",
           "running_threads", "settle", "SETTLE_S", "SETTLE_STEP_S",
           "SETTLE_REST"]


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


SAMPLES, SAMPLE_GAP_S = 8, 0.002
AGREE = 3  # the first reads that, all on one side of the line, decide alone
PROC_LOADAVG = "/proc/loadavg"


def others_load(spare: float | None = None) -> float:
    """Runnable threads of other processes: the kernel's count of runnable threads
    (`/proc/loadavg`'s fourth field) less this process's (`running_threads` and the
    loading one), the median of `SAMPLES` reads at least
    `SAMPLE_GAP_S` apart (module doc), or of the first `AGREE` when each of them alone puts
    the others above `spare` (the cores the caller leaves free), or each at or below it:
    their median then falls on the same side as any would (a steady load, busy or quiet,
    costs 2 gaps, not 7). The reads a load took ahead (`read_ahead`) come first, and a gap they
    already span is not slept. Where there is no such count, the one-minute load average
    less this thread (0 where the platform has neither)."""
    try:
        others, last = _taken_ahead()  # each read's runnable count, this thread left out
        while len(others) < SAMPLES and not _agree(others, spare):
            if others and (gap := SAMPLE_GAP_S - (monotonic() - last)) > 0:
                sleep(gap)
            last = monotonic()
            others.append(_others_now())
        return _median(others)
    except (OSError, IndexError, ValueError):
        pass
    try:
        return max(0.0, os.getloadavg()[0] - 1.0)
    except (AttributeError, OSError):
        return 0.0


def _median(values: list[float]) -> float:
    """The middle read (the mean of the two middle ones of an even count)."""
    ordered = sorted(values)
    return (ordered[(len(ordered) - 1) // 2] + ordered[len(ordered) // 2]) / 2


def _others_now() -> float:
    """One read: the runnable threads now, less the reading one and this process's others.
    This process's own threads are no neighbours: numpy's BLAS workers spin ~0.1 s after
    a call (a load that decoded or checked weights), and counting them turned spinning off
    on free cores (int8 minilm-l3 at 2 threads: 2.77 ms a run against 2.12 spinning). A
    process running models side by side in its own threads chooses to share its cores,
    and sets `threads` for it."""
    with open(PROC_LOADAVG) as f:
        runnable = int(f.read().split()[3].partition("/")[0])
    return max(0.0, runnable - 1.0 - len(running_threads()))


READ_AGE_S = 0.1
"""Reads taken ahead longer ago describe another moment than the one the rule decides in
(a large file's load): they are dropped, and the rule reads anew."""

_AHEAD: ContextVar[list[tuple[float, float]] | None] = ContextVar("rlx_reads_ahead",
                                                                  default=None)
"""The (monotonic time, `_others_now`) reads the running load took for its thread rule."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


def reads_ahead(load: Callable[_P, _R]) -> Callable[_P, _R]:
    """`load`, reading the runnable count as it starts (and where it calls `read_ahead`)
    for the first `others_load` its engine makes: the load's own work, not sleeps, then
    spans the gaps between reads (2 gaps, ~4 ms of a BERT encoder's ~15 ms load when the
    machine is quiet, more when busy, where a sleep overshoots). The reads are the load's
    alone: gone when it returns, and never seen by another thread's load."""
    @functools.wraps(load)
    def reading(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        token = _AHEAD.set([])
        try:
            read_ahead()
            return load(*args, **kwargs)
        finally:
            _AHEAD.reset(token)

    return reading


def read_ahead() -> None:
    """One read now for the running load's thread rule (`reads_ahead`); nothing outside a
    load, within `SAMPLE_GAP_S` of its last read, or once it holds `SAMPLES`."""
    reads = _AHEAD.get()
    if reads is None or len(reads) >= SAMPLES \
            or (reads and monotonic() - reads[-1][0] < SAMPLE_GAP_S):
        return
    with suppress(OSError, IndexError, ValueError):  # the rule reads, and falls back, itself
        reads.append((monotonic(), _others_now()))


def _taken_ahead() -> tuple[list[float], float]:
    """The reads the running load took ahead within `READ_AGE_S`, used up by this call,
    and the time of the last (0 when none)."""
    reads = _AHEAD.get()
    if not reads:
        return [], 0.0
    now = monotonic()
    fresh = [(at, others) for at, others in reads if now - at <= READ_AGE_S]
    reads.clear()
    return [others for _, others in fresh], (fresh[-1][0] if fresh else 0.0)


def _agree(others: list[float], spare: float | None) -> bool:
    """Whether `AGREE` reads were taken and each alone is on the same side of `spare`."""
    if spare is None or len(others) < AGREE:
        return False
    return len({n > spare for n in others}) == 1


def shares_cores(threads: int, cores: int, load: float) -> bool:
    """True when `threads` of this process and `load` other runnable threads do not fit
    on `cores`."""
    return threads + load > cores


def spinning_pays(threads: int | None, cores: int | None = None,
                  load: float | None = None) -> bool:
    """Whether onnxruntime's workers should spin at `threads` intra-op threads (None: its
    default, one per core); `cores` and `load` default to this machine's, now."""
    cores = usable_cores() if cores is None else cores
    wanted = cores if threads is None else threads
    if wanted <= 1:
        return True  # no worker threads: onnxruntime's default stands
    load = others_load(spare=cores - wanted) if load is None else load
    return not shares_cores(wanted, cores, load)


def threads_that_fit(threads: int | None, cores: int | None = None,
                     load: float | None = None) -> int | None:
    """The threads a pool whose workers wait for each other (numpy's BLAS, rlx's own
    `kernels.parallel`) should run at: `threads` (None: one per core, kept None) when they
    fit beside `load` on `cores`, else as many as the free cores hold, at least 1. Such a
    pool's every call needs all its threads running at once; beside other work each call
    waits for a descheduled worker (docs/engines.md has the measurements). `cores` and
    `load` default to this machine's, now; 1 thread decides nothing."""
    cores = usable_cores() if cores is None else cores
    wanted = cores if threads is None else threads
    if wanted <= 1:
        return threads
    load = others_load(spare=cores - wanted) if load is None else load
    if not shares_cores(wanted, cores, load):
        return threads
    return max(1, min(wanted, int(cores - load)))


SETTLE_S, SETTLE_STEP_S = 0.25, 0.001  # OpenBLAS's workers spin ~0.1 s (2**28 cycles)
SETTLE_REST = 2.0  # times the wait, rested once the threads parked
PROC_TASKS = "/proc/self/task"


def running_threads(ignore: frozenset[str] = frozenset()) -> set[str]:
    """Ids of the threads of this process, the calling one and `ignore` left out, that are
    running or runnable now (state R in /proc/self/task/*/stat; none where the platform
    has no such files)."""
    try:
        tids = os.listdir(PROC_TASKS)
    except OSError:
        return set()
    running, me = set(), str(_thread.get_native_id())
    for tid in set(tids) - ignore - {me}:
        try:
            with open(os.path.join(PROC_TASKS, tid, "stat")) as f:
                stat = f.read()
        except OSError:  # the thread ended between the listing and the read
            continue
        # the state follows the command name, in parentheses (which the name may hold too)
        if stat[stat.rindex(")") + 2:][:1] == "R":
            running.add(tid)
    return running


def settle(ignore: frozenset[str] = frozenset(), limit: float = SETTLE_S) -> set[str]:
    """Wait, `SETTLE_STEP_S` at a time, until no thread of this process runs but the
    caller and `ignore`, then `SETTLE_REST` times as long again (the machine stays
    disturbed a while after they park: OpenVINO right after numpy's BLAS workers parked ran
    1.81x as slow as after a sleep, 1.16x after as long again, 0.98x after 0.2 s); the ids
    of those still running after `limit` seconds (threads that do not park: the caller's
    own, or, on a machine loaded far past its cores, OpenVINO's workers, which yield while
    they wait for work), none when all parked."""
    start, slept = monotonic(), False
    while running := running_threads(ignore):
        if monotonic() - start > limit:
            return running
        sleep(SETTLE_STEP_S)
        slept = True
    if slept:
        sleep(SETTLE_REST * (monotonic() - start))
    return set()
