"""Interleaved rlx / onnxruntime p50 latency on baked artifacts, for A/B runs of two rlx
checkouts on a busy machine.

`python -m benchmarks.ab_ratio THREADS DIR MODEL...` runs `DIR/MODEL.rlx` (the baked exact
artifact) and the model's ONNX file in onnxruntime, three calls each in turn for a few
seconds, and prints both p50s and their ratio. At one thread the clock is the thread's CPU
time (`time.thread_time`: another process taking the core does not count), else wall time.
Run it once with `PYTHONPATH=<other checkout>/src` for the "before" column.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

__all__ = ["main"]


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
                    for _ in range(3):
                        start = clock()
                        run()
                        times[key].append(clock() - start)
        r, o = (statistics.median(times[k]) * 1e3 for k in ("rlx", "ort"))
        print(f"{name:18s} threads={args.threads} rlx {r:8.2f} ms  onnxruntime {o:8.2f} ms  "
              f"ratio {r / o:5.2f}", flush=True)


if __name__ == "__main__":
    main()
