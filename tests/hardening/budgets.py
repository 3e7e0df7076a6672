"""Budgets a refusal must stay within: CPU time and traced allocations, never wall time.

CPU time (`time.process_time`: this process's CPU, every thread) does not grow with the
machine's load the way wall time does; tracemalloc sees every Python object and numpy
buffer allocated while the call runs.
"""

from __future__ import annotations

import time
import tracemalloc

import pytest

from rlx.errors import RlxError
from tests.hardening import harness

__all__ = ["FAST", "SMALL", "cpu_and_peak", "refused"]

SMALL = 2 << 20  # the most any refusal here may allocate
# CPU seconds (time.process_time: this process's CPU, so the machine's load does not count,
# tracemalloc's overhead does) any refusal here may take: the contract's per-case limit
FAST = harness.SECONDS


def refused(error: type[RlxError], call, *, match: str | None = None, budget: int = SMALL,
            seconds: float = FAST):
    """Run `call`; it must raise `error` (matching `match`) within `seconds` of CPU time and
    a traced peak of `budget` bytes."""
    def expect() -> pytest.ExceptionInfo:
        with pytest.raises(error, match=match) as caught:
            call()
        return caught

    cpu_seconds, peak, caught = cpu_and_peak(expect)
    assert cpu_seconds < seconds, f"took {cpu_seconds:.2f} s of CPU"
    assert peak < budget, f"allocated {peak} bytes before refusing"
    assert "\n" not in str(caught.value)
    return caught.value


def cpu_and_peak(call) -> tuple[float, int, object]:
    """(CPU seconds, traced peak bytes, result) of `call()`."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    start = time.process_time()
    try:
        result = call()
    finally:
        peak = tracemalloc.get_traced_memory()[1] - base
        if started:
            tracemalloc.stop()
    return time.process_time() - start, peak, result
