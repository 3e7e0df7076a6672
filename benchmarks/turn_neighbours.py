"""How one engine's turn is slowed by the engine timed before it, in one process (issue 32).

    python -m benchmarks.turn_neighbours [--models a,b] [--target openvino] [--threads 2]

Per model, one process builds rlx's onnxruntime, OpenVINO and numpy engines on the exact
bake (benchmarks.bench_engines.prepare) and, in rounds whose order rotates, times a 30 ms
turn of `--target` right after: one call of each other engine; one numpy call and auto's
wait (`rlx.engines.cores.settle`); a 0.3 s sleep, which every thread sleeps through. Each
printed ratio is the median over rounds of that turn over the same round's turn after the
sleep: 1.0 is no disturbance. This is the in-process bias auto's timing must not have
(`engines/turns.py`); the runnable count of /proc/loadavg is printed with it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.bench_engines import prepare

__all__ = ["main"]

ENGINES = ("onnxruntime", "openvino", "numpy")
TURN_S, REST_S = 0.03, 0.3


def _turn(run: Callable[[], object]) -> float:
    """The median call of `TURN_S` seconds of calls."""
    times: list[float] = []
    end = time.perf_counter() + TURN_S
    while not times or time.perf_counter() < end:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ratios(name: str, work: Path, target: str, threads: int, rounds: int) -> dict[str, float]:
    """The target's turn after each condition over its turn after a sleep (module doc)."""
    import rlx
    from rlx.engines import cores

    paths = prepare(name, work)
    feeds = dict(np.load(paths["feeds"]))
    models = {e: rlx.load(paths["rlx"], engine=e, precision="exact", threads=threads,
                          cache_dir=paths["cache"]) for e in ENGINES}
    for model in models.values():
        model.run(feeds)

    def settled() -> None:
        models["numpy"].run(feeds)
        cores.settle()

    before: dict[str, Callable[[], object]] = {
        **{e: (lambda m=m: m.run(feeds)) for e, m in models.items() if e != target},
        "numpy, then auto's wait": settled, "sleep": lambda: time.sleep(REST_S)}
    times: dict[str, list[float]] = {c: [] for c in before}
    order = list(before)
    for r in range(rounds):
        for condition in order[r % len(order):] + order[:r % len(order)]:
            before[condition]()
            times[condition].append(_turn(lambda: models[target].run(feeds)))
    return {c: statistics.median(a / b for a, b in zip(t, times["sleep"]))
            for c, t in times.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="minilm-l3,nudenet-320n")
    p.add_argument("--target", default="openvino", choices=ENGINES[:2])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--work", type=Path, default=Path("/tmp/rlx-auto-truth"))
    args = p.parse_args(argv)
    for name in args.models.split(","):
        got = ratios(name, args.work, args.target, args.threads, args.rounds)
        with open("/proc/loadavg") as f:
            runnable = f.read().split()[3]
        print(f"{name}, {args.target} at {args.threads} threads after: "
              + ", ".join(f"{c} {v:.2f}" for c, v in got.items())
              + f" (runnable/threads {runnable})", flush=True)


if __name__ == "__main__":
    main()
