"""Interleaved rlx / onnxruntime p50 latency on baked artifacts, for A/B runs of two rlx
checkouts on a busy machine.

`python -m benchmarks.ab_ratio THREADS DIR MODEL...` runs `DIR/MODEL.rlx` (the baked exact
artifact) and the model's ONNX file in onnxruntime in turns for a few seconds, and prints
both p50s and their ratio. At one thread a turn is three calls and the clock is the
thread's CPU time (`time.thread_time`: another process taking the core does not count).
With more threads the clock is wall time and a turn lasts `--turn` seconds, its first two
calls untimed: both runtimes' pools keep spinning after a call (onnxruntime's workers,
OpenBLAS's threads), and on a 2-core machine that spin took the cores the other runtime's
next calls needed (ppocr-cls at two threads: rlx 8.1 ms interleaved call by call, 4.7 ms
with onnxruntime's spinning off, against 4.3 ms at one thread). Run it once with
`PYTHONPATH=<other checkout>/src` for the "before" column.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

__all__ = ["main", "turn"]


def main(argv: list[str] | None = None) -> None:
    import onnxruntime as ort
    from threadpoolctl import threadpool_limits

    from rlx.artifact import read_rlx
    from rlx.runtime import Session
    from tests.real_models import FEEDS, fetch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("threads", type=int)
    p.add_argument("folder")
    p.add_argument("models", nargs="+")
    p.add_argument("--seconds", type=float, default=2.5)
    p.add_argument("--turn", type=float, default=0.5,
                   help="seconds each runtime runs in turn, with more than one thread")
    args = p.parse_args(argv)
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    for name in args.models:
        feeds = FEEDS[name](0)
        compiled = Session().compile(read_rlx(f"{args.folder}/{name}.rlx").into_runtime_graph())
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = args.threads, 1
        sess = ort.InferenceSession(str(fetch(name)), opts, providers=["CPUExecutionProvider"])
        times: dict[str, list[float]] = {"rlx": [], "ort": []}
        runs = {"rlx": functools.partial(compiled.run, feeds),
                "ort": functools.partial(sess.run, None, feeds)}
        with threadpool_limits(args.threads):
            for run in runs.values():
                run()  # warm-up
            end = time.perf_counter() + args.seconds
            while time.perf_counter() < end:
                for key, run in runs.items():
                    times[key] += turn(run, clock, args.turn if args.threads > 1 else None)
        r, o = (statistics.median(times[k]) * 1e3 for k in ("rlx", "ort"))
        print(f"{name:18s} threads={args.threads} rlx {r:8.2f} ms  onnxruntime {o:8.2f} ms  "
              f"ratio {r / o:5.2f}", flush=True)


def turn(run, clock, seconds: float | None) -> list[float]:
    """One runtime's turn: three timed calls; or, given `seconds`, two untimed calls (while
    the other runtime's threads stop spinning), then timed calls until the turn is over."""
    def timed() -> float:
        start = clock()
        run()
        return clock() - start

    if seconds is None:
        return [timed() for _ in range(3)]
    run(), run()
    end = time.perf_counter() + seconds
    times = [timed()]
    while time.perf_counter() < end:
        times.append(timed())
    return times


if __name__ == "__main__":
    main()
