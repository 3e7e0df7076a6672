"""Does `engine="auto"` pick what the user would measure? (issue 32)

    python -m benchmarks.auto_truth [--models a,b] [--rounds 2] [--threads 1,2]

Per model, thread count and load, the ground truth is fresh-process, one-engine-at-a-time
latency (benchmarks/engine_probe.py, one process per runner, runners interleaved round by
round): rlx's onnxruntime and OpenVINO engines, and for reference plain onnxruntime with
its default spinning and with spinning off, and plain OpenVINO f32. auto then chooses in
a fresh process on a cold cache, measuring on the same feeds (`example`: with none it
measures zeros with symbolic dims at 1); its cold first result, measurement included, is
shown.
Then auto itself is timed with that choice cached, in the same rounds as the others
("rlx:auto:exact": it runs the threads its timing chose, `when_shared`).
`pick/best` is the ground-truth p50 of auto's pick over the fastest rlx engine;
`pick/plain` is over min(plain onnxruntime, plain OpenVINO f32), the issue's target.

"loaded" runs beside two CPU-bound processes this benchmark starts (and stops) itself;
"quiet" adds none, so it is only as quiet as the machine is (the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.bench_engines import MODELS, _probe, prepare

__all__ = ["main"]

TRUTH = ("rlx:onnxruntime:exact", "rlx:openvino:exact", "ort", "ort:nospin", "ov:f32",
         "rlx:auto:exact")
RLX = {"onnxruntime": "rlx:onnxruntime:exact", "openvino": "rlx:openvino:exact"}
CALLS = {"warmup": 3, "min_calls": 10, "min_seconds": 0.4}
BURN = "while True: pass"


@contextmanager
def background_load(processes: int) -> Iterator[None]:
    """`processes` CPU-bound interpreters for the duration; stopped by their own pids."""
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(processes)]
    try:
        time.sleep(1.0 if burners else 0.0)  # let the scheduler see them
        yield
    finally:
        for proc in burners:
            proc.kill()
            proc.wait()


def truth(base: dict, threads: int, rounds: int) -> dict[str, float | None]:
    """Fresh-process p50 (ms) per runner: the median over interleaved rounds."""
    p50s: dict[str, list[float]] = {r: [] for r in TRUTH}
    for _ in range(rounds):
        for runner in TRUTH:
            got = _probe({**base, "runner": runner, "threads": threads, "latency": True,
                          **CALLS})
            if "p50" in got:
                p50s[runner].append(got["p50"] * 1e3)
    return {r: statistics.median(v) if v else None for r, v in p50s.items()}


SETTLING_LOADS = 3  # later loads that may measure what a busy first load left unbuilt


def auto_pick(base: dict, threads: int) -> dict:
    """auto's choice in a fresh process on a cold cache, then again while the choice is
    provisional (engines the cold budget left unbuilt are measured at later loads), at most
    `SETTLING_LOADS` times: what it measured last, and the loads it took."""
    shutil.rmtree(base["cache"], ignore_errors=True)
    args = {**base, "runner": "rlx:auto:exact", "threads": threads, "example": True}
    cold = got = _probe(args)
    for loads in range(1, SETTLING_LOADS + 2):
        entries = json.loads((Path(base["cache"]) / "engines.json").read_text())
        entry = next(iter(entries.values()))
        if not entry.get("unbuilt") or loads > SETTLING_LOADS:
            break
        got = _probe(args)
    return {"engine": got.get("engine", "?"), "cold_s": cold.get("first_result_seconds"),
            "measured_ms": entry.get("measured_ms", {}), "when_shared": entry.get("when_shared"),
            "loads": loads}


def row(name: str, load: str, threads: int, p50: dict, pick: dict) -> dict:
    best = min(p50[r] for r in RLX.values() if p50[r] is not None)
    plain = min(p50[r] for r in ("ort", "ov:f32") if p50[r] is not None)
    picked = p50.get("rlx:auto:exact") or p50.get(RLX.get(pick["engine"], ""))
    return {"model": name, "load": load, "threads": threads, "loadavg": os.getloadavg()[0],
            "p50_ms": p50, "pick": pick, "pick_over_best": picked / best if picked else None,
            "pick_over_plain": picked / plain if picked else None}


def show(r: dict) -> str:
    p = r["p50_ms"]

    def ms(k: str) -> str:
        return f"{p[k]:7.2f}" if p[k] is not None else "    n/a"

    measured = ", ".join(f"{k[:4]} {v:.2f}" for k, v in r["pick"]["measured_ms"].items())
    ratio = (f"{r['pick_over_best']:.2f} / {r['pick_over_plain']:.2f}"
             if r["pick_over_best"] else "n/a")
    shared = f" ({r['pick']['when_shared']})" if r["pick"].get("when_shared") else ""
    loads = f", {r['pick']['loads']} loads" if r["pick"].get("loads", 1) > 1 else ""
    return (f"| {r['model']} | {r['load']} ({r['loadavg']:.1f}) | {r['threads']} | "
            f"{ms('rlx:onnxruntime:exact')} | {ms('rlx:openvino:exact')} | {ms('ort')} | "
            f"{ms('ort:nospin')} | {ms('ov:f32')} | {ms('rlx:auto:exact')} | "
            f"{r['pick']['engine']}{shared} ({measured}; cold {r['pick']['cold_s']:.1f} s"
            f"{loads}) | {ratio} |")


HEADER = ("| model | load (loadavg) | threads | rlx ort | rlx ov | ort | ort nospin | ov f32 | "
          "auto | auto pick (its ms; cold first result) | pick/best / pick/plain |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--loads", default="quiet,loaded")
    p.add_argument("--work", type=Path, default=Path("/tmp/rlx-auto-truth"))
    p.add_argument("--json", type=Path, help="write the rows here")
    args = p.parse_args(argv)
    rows = []
    print(HEADER, flush=True)
    for name in args.models.split(","):
        paths = prepare(name, args.work)
        base = {k: paths[k] for k in ("onnx", "rlx", "feeds", "reference", "cache")}
        for load in args.loads.split(","):
            with background_load(2 if load == "loaded" else 0):
                for threads in (int(t) for t in args.threads.split(",")):
                    pick = auto_pick(base, threads)  # cached: auto's truth runs its pick
                    p50 = truth(base, threads, args.rounds)
                    rows.append(row(name, load, threads, p50, pick))
                    print(show(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
