"""Anonymous memory per worker process over one artifact (issue 35), without Ray:

    .venv/bin/python -m benchmarks.bench_workers WARM.rlx MODEL.rlx [--workers 1,2,4]
        [--engines openvino,onnxruntime,numpy] [--memory shared]

N fresh processes each load `WARM` (a small model: the libraries and the engine's first-load
costs paid), then all load `MODEL` at once on the same engine and run it once on zeros
(symbolic dims: 1 for the first, 320 for the others). Each reports its RssAnon growth at
load and after the run, and the weight bytes its runner counts as copied
(`private_weight_bytes`, rlx.engines.sharing); every worker holds the model until all have
reported. Workers load with the memory hint `--memory` ("shared", as `rlx.ray`'s replicas;
"private" for a single process's load). The table is docs/engines.md's "What each engine
shares across worker processes".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

_WORKER = """
import json, sys, numpy as np, rlx
from rlx.engines.mapping import anon_rss_bytes
warm, path, engine, memory = sys.argv[1:5]
def zeros(model):
    return {i.name: np.zeros([d if isinstance(d, int) else 320 if k else 1
                              for k, d in enumerate(i.shape)], i.dtype) for i in model.inputs}
small = rlx.load(warm, engine=engine, threads=1, memory=memory)
small.run(zeros(small))
before = anon_rss_bytes()
model = rlx.load(path, engine=engine, threads=1, memory=memory)
loaded = anon_rss_bytes()
model.run(zeros(model))
print(json.dumps({"load": loaded - before, "run": anon_rss_bytes() - before,
                  "copied": model.runner.private_weight_bytes}), flush=True)
sys.stdin.readline()  # hold the model until every worker has reported
"""


def workers(warm: str, path: str, engine: str, n: int, memory: str = "shared"
            ) -> list[dict[str, int]]:
    """`n` workers loading `path` on `engine` at once: each one's counters, in bytes."""
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, warm, path, engine, memory],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    try:
        return [json.loads(p.stdout.readline()) for p in procs]  # type: ignore[union-attr]
    finally:
        for p in procs:
            p.communicate("\n", timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("warm")
    parser.add_argument("model")
    parser.add_argument("--engines", default="openvino,onnxruntime,numpy")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--memory", default="shared", choices=("shared", "private"))
    args = parser.parse_args()
    print("| engine | workers | per worker at load / after first run MiB | counted copy MiB |")
    print("|---|---|---|---|")
    for engine in args.engines.split(","):
        for n in map(int, args.workers.split(",")):
            rows = workers(args.warm, args.model, engine, n, args.memory)
            cells = ", ".join(f"{r['load'] / 2**20:.1f} / {r['run'] / 2**20:.1f}" for r in rows)
            print(f"| {engine} | {n} | {cells} | {rows[0]['copied'] / 2**20:.1f} |")


if __name__ == "__main__":
    main()
