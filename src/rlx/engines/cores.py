"""Whether this process has its cores to itself: the rule behind onnxruntime's spinning.

onnxruntime's intra-op worker threads spin (busy-wait) between parallel sections by
default, which saves a wake-up when the process owns its cores. When it shares them (its
threads plus the other runnable work exceed the cores it may use: other processes, other
workers of the same service), the spinning burns the time slices that the others, and
this process's own calling thread, need (docs/engines.md has the measurements). So rlx
turns spinning off when, at load, `threads` plus the one-minute load average not due to
this process exceed the cores in the process's affinity mask. With one thread there are
no workers and nothing to decide.
"""

from __future__ import annotations

import os

__all__ = ["usable_cores", "others_load", "shares_cores", "spinning_pays"]


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def others_load() -> float:
    """Runnable work besides this process: the one-minute load average less the one
    thread loading the model (0 where the platform has no load average)."""
    try:
        return max(0.0, os.getloadavg()[0] - 1.0)
    except (AttributeError, OSError):
        return 0.0


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
    return not shares_cores(wanted, cores, others_load() if load is None else load)
