"""Shared memory under Ray (issue: Ray integration, item 3): N Ray actors on this machine
each `rlx.load` the same artifact; how much private (anonymous) memory does each one add?

    .venv/bin/python -m benchmarks.bench_ray [--workers 2,4] [--engines numpy,onnxruntime,openvino]

Each actor is a fresh worker process. It first loads and runs a tiny model on the same
engine (so the libraries, their arenas and rlx's own imports are already paid for), then
reads /proc/self/status (RssAnon) and /proc/self/smaps_rollup before `rlx.load`, after it,
and after a first run. The weights live in the file's page cache: file-backed, shared
between the workers, so each one's proportional share of the artifact's pages (Pss, read
from /proc/self/smaps once every worker has run) falls as 1/N. Target: anonymous growth at
load <= 2% of the weight bytes with the numpy engine (issue 35); the other engines are
measured and reported as they are.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, WORK, mib, save_results  # noqa: E402

TARGET = 0.02  # anonymous growth at load / weight bytes, numpy engine
ENGINES = ("numpy", "onnxruntime", "openvino")
SYNTHETIC = {"k": 2048, "hidden": 4096, "n": 2048}  # 64 MiB of f32 weights


def rollup() -> dict[str, int]:
    """This process's memory counters in bytes: RssAnon (status) and smaps_rollup's."""
    out: dict[str, int] = {}
    for path, keys in (("/proc/self/status", ("RssAnon", "RssFile")),
                       ("/proc/self/smaps_rollup", ("Pss_Anon", "Pss_File", "Shared_Clean",
                                                    "Private_Clean", "Anonymous"))):
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in keys:
                    out[key] = int(value.split()[0]) * 1024
    return out


def file_pages(path: str) -> dict[str, int]:
    """Resident bytes of this process's maps of `path` (Rss) and its proportional share
    of them (Pss: a page resident in N processes counts 1/N in each), from /proc/self/smaps."""
    target = os.path.realpath(path)
    out = {"Rss": 0, "Pss": 0}
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
                inside = len(head) >= 6 and head[5] == target
            elif inside and head[0].rstrip(":") in out:
                out[head[0].rstrip(":")] += int(head[1]) * 1024
    return out


def zero_feeds(model) -> dict[str, Any]:
    """Zeros of each declared input shape, symbolic dims 1."""
    import numpy as np

    return {spec.name: np.zeros([d if isinstance(d, int) else 1 for d in spec.shape],
                                spec.dtype) for spec in model.inputs}


class LoadProbe:
    """One worker: warm up on `warm`, then load `path` and keep it loaded."""

    def __init__(self, warm: str, engine: str):
        import rlx

        self.engine = engine
        small = rlx.load(warm, engine=engine, threads=1)
        small.run(zero_feeds(small))
        self.model: Any = None

    def load(self, path: str) -> dict[str, Any]:
        import rlx

        before = rollup()
        self.model = rlx.load(path, engine=self.engine, threads=1)
        loaded = rollup()
        self.model.run(zero_feeds(self.model))
        return {"pid": os.getpid(), "engine": self.model.engine, "before": before,
                "loaded": loaded, "ran": rollup()}

    def artifact_pages(self) -> dict[str, int]:
        return file_pages(self.model.path)


def weight_bytes(path: str) -> int:
    """Bytes of the constants the runtime graph holds: what an engine must keep."""
    from rlx.artifact import open_artifact
    from rlx.ir.ops.sources import Constant

    graph = open_artifact(path).into_runtime_graph()
    return sum(n.op.nbytes for n in graph.nodes() if isinstance(n.op, Constant))


def measure(path: str, warm: str, engine: str, workers: int) -> dict[str, Any]:
    """`workers` fresh actors loading `path` at once; their counters, and each one's
    share of the shared pages once all have run."""
    import ray

    probe = ray.remote(num_cpus=0)(LoadProbe)
    actors = [probe.remote(warm, engine) for _ in range(workers)]  # type: ignore[attr-defined]
    try:
        runs = ray.get([a.load.remote(path) for a in actors])
        shared = ray.get([a.artifact_pages.remote() for a in actors])
    finally:
        for actor in actors:
            ray.kill(actor)
    weights = weight_bytes(path)
    rows = []
    for run, after in zip(runs, shared):
        load = run["loaded"]["RssAnon"] - run["before"]["RssAnon"]
        first = run["ran"]["RssAnon"] - run["before"]["RssAnon"]
        rows.append({"pid": run["pid"], "engine": run["engine"], "anon_load": load,
                     "anon_first_run": first, "anon_load_share": load / weights,
                     "anon_first_run_share": first / weights,
                     "artifact_rss": after["Rss"], "artifact_pss": after["Pss"],
                     "raw": run})
    return {"weights": weights, "workers": rows}


def start_cluster(num_cpus: int = 2) -> None:
    """A local cluster whose workers import this repository (benchmarks, tests) and its
    `src` (this tree's rlx, not an installed one)."""
    import ray

    from rlx.ray.serve import cluster_environment

    cluster_environment()
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(
                 (str(ROOT / "src"), str(ROOT)))}})


def prepare(folder: Path) -> dict[str, tuple[str, str]]:
    """(artifact, warm-up artifact) per model: a 64 MiB synthetic MLP and minilm-l3."""
    from rlx import bake_file
    from tests.engines.conftest import write_mlp
    from tests.real_models import fetch

    folder.mkdir(parents=True, exist_ok=True)
    warm = folder / "warm.rlx"
    write_mlp(warm, k=64, hidden=8, n=8)
    synthetic = folder / "mlp-64MiB.rlx"
    write_mlp(synthetic, **SYNTHETIC)
    minilm = folder / "minilm-l3.rlx"
    if not minilm.exists():
        bake_file(fetch("minilm-l3"), minilm, profile="exact")
    return {"synthetic MLP 64 MiB": (str(synthetic), str(warm)),
            "minilm-l3": (str(minilm), str(warm))}


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def table(results: dict[str, Any]) -> str:
    lines = ["| model | engine | workers | weights MiB | anon growth at load, per worker "
             "(% of weights) | after first run | artifact pages resident / own share (Pss) "
             "per worker MiB |",
             "|---|---|---|---|---|---|---|"]
    for model, by_engine in results["models"].items():
        for engine, by_n in by_engine.items():
            for n, m in by_n.items():
                if "error" in m:
                    lines.append(f"| {model} | {engine} | {n} | | {m['error']} | | |")
                    continue
                rows = m["workers"]
                load = ", ".join(f"{mib(r['anon_load'])} ({r['anon_load_share']:.1%})"
                                 for r in rows)
                first = ", ".join(f"{mib(r['anon_first_run'])} "
                                  f"({r['anon_first_run_share']:.1%})" for r in rows)
                pss = ", ".join(f"{mib(r['artifact_rss'])} / {mib(r['artifact_pss'])}"
                                for r in rows)
                lines.append(f"| {model} | {engine} | {n} | {mib(m['weights'])} | {load} | "
                             f"{first} | {pss} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=lambda t: [int(x) for x in _csv(t)],
                        default=[2, 4])
    parser.add_argument("--engines", type=_csv, default=list(ENGINES))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    import ray

    models = prepare(WORK / "ray")
    start_cluster()
    results: dict[str, Any] = {"date": datetime.date.today().isoformat(), "target": TARGET,
                               "models": {}}
    try:
        for model, (path, warm) in models.items():
            for engine in args.engines:
                for n in args.workers:
                    print(f"{model}: {engine} x{n}", flush=True)
                    try:
                        m = measure(path, warm, engine, n)
                    except ray.exceptions.RayError as err:
                        m = {"error": str(err).strip().splitlines()[-1]}
                    results["models"].setdefault(model, {}).setdefault(engine, {})[str(n)] = m
    finally:
        ray.shutdown()
    return save_results(results, table(results), args.out, f"ray-memory-{results['date']}")


if __name__ == "__main__":
    main()
