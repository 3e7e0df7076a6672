"""The numpy engine beside other work: its thread rule against BLAS held at the threads asked.

    python -m benchmarks.numpy_shared_cores [--models a,b] [--threads 1,2] [--busy 2]

Per model and thread count, in interleaved rounds, a fresh process per cell runs the exact
bake (`benchmarks.bench_engines.prepare`) on its seeded feeds: "rule" is
`rlx.load(engine="numpy", threads=T)`, which runs at the threads that fit on the free cores
(`rlx.engines.cores.threads_that_fit`); "held" is the same compiled graph with numpy's BLAS
held at T threads (`threadpoolctl`), the engine before the rule. Each cell prints wall and
CPU ms per call (the mean of `--calls` calls after 3 warm-ups), the median over rounds,
and the highest runnable count of /proc/loadavg seen after a cell. `--busy N` adds N
CPU-bound processes (`benchmarks.auto_truth.background_load`) for the whole run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.auto_truth import background_load
from benchmarks.bench_engines import prepare

__all__ = ["main"]

VARIANTS = ("held", "rule")


def cell(path: str, feeds_path: str, threads: int, variant: str, calls: int) -> dict:
    """Wall and CPU seconds per call of one variant (module doc), in this process."""
    import time

    import numpy as np
    from threadpoolctl import threadpool_limits

    import rlx

    model = rlx.load(path, engine="numpy", threads=threads)
    feeds = dict(np.load(feeds_path))
    if variant == "held":
        compiled, order = model.runner.compiled, model.runner.compiled.input_names
        limits = threadpool_limits(threads, user_api="blas")

        def run() -> None:
            compiled.call(*[feeds[name] for name in order])
    else:
        limits = threadpool_limits(None)  # changes nothing: the engine sets its own count

        def run() -> None:
            model.run(feeds)
    with limits:
        for _ in range(3):
            run()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            run()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    used = threads if variant == "held" else model.runner.threads
    return {"wall": wall / calls, "cpu": cpu / calls, "used": used}


def _fresh(paths: dict, threads: int, variant: str, calls: int) -> dict:
    code = ("import json, sys; from benchmarks.numpy_shared_cores import cell; "
            "print(json.dumps(cell(*sys.argv[1:3], int(sys.argv[3]), sys.argv[4], "
            "int(sys.argv[5]))))")
    out = subprocess.run([sys.executable, "-c", code, paths["rlx"], paths["feeds"],
                          str(threads), variant, str(calls)],
                         check=True, capture_output=True, text=True).stdout
    with open("/proc/loadavg") as f:
        runnable = int(f.read().split()[3].partition("/")[0])
    return {**json.loads(out.splitlines()[-1]), "runnable": runnable}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="captcha-crnn,minilm-l3,nudenet-320n")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--busy", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--work", type=Path, default=Path("/tmp/rlx-auto-truth"))
    args = p.parse_args(argv)
    paths = {name: prepare(name, args.work) for name in args.models.split(",")}
    with background_load(args.busy):
        for name, where in paths.items():
            for threads in map(int, args.threads.split(",")):
                got: dict[str, list[dict]] = {v: [] for v in VARIANTS}
                for r in range(args.rounds):
                    for variant in VARIANTS[r % 2:] + VARIANTS[:r % 2]:
                        got[variant].append(_fresh(where, threads, variant, args.calls))
                print(f"{name} threads={threads} busy={args.busy}: " + "; ".join(
                    f"{v} {_median(c, 'wall'):.1f} ms ({_median(c, 'cpu'):.1f} CPU, "
                    f"{c[0]['used']} used)" for v, c in got.items())
                    + f"; runnable <= {max(c['runnable'] for v in got.values() for c in v)}",
                    flush=True)


def _median(cells: list[dict], key: str) -> float:
    return 1e3 * statistics.median(c[key] for c in cells)


if __name__ == "__main__":
    main()
