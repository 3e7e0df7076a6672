"""Concurrency: one CompiledGraph run from many threads, one artifact mapped by many
processes.

Threads: each real model (../shared/MODELS.md) is baked with the exact profile, written,
read back and compiled once; a serial pass over a few distinct seeded inputs gives the
reference; then every thread makes its calls, cycling through the inputs from its own
starting point, and each result must be bitwise identical to the serial one.

Processes: several children open the same artifact, compile and run it, and report what
their resident set grew by (RssAnon / RssFile, /proc/self/status) and, for the artifact's
own mapping, its Rss and Pss (/proc/self/smaps): the weights must be file-backed pages,
and pages that several processes map are shared (Pss = Rss / number of sharers).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from rlx import BakeOptions, BakeProfile, RlxFile, bake
from rlx.artifact import read_rlx, write_rlx
from rlx.ir import Graph, Shape
from rlx.onnx import import_onnx
from rlx.runtime import Session
from tests.hardening.harness import ROOT
from tests.real_models import fetch

DISTINCT_INPUTS = 6
# silero-vad branches on its input's length: import it for the 16 kHz chunk (MODELS.md)
INPUT_SHAPES = {"silero-vad": {"input": (1, 576)}}


def feeds(name: str, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs of the shapes and ranges each model expects (MODELS.md)."""
    rng = np.random.default_rng(seed)
    if name == "minilm-l3":
        ids, n = np.zeros((1, 64), np.int64), int(rng.integers(8, 60))
        ids[0, 0], ids[0, 1:n - 1], ids[0, n - 1] = 101, rng.integers(1000, 30000, n - 2), 102
        mask = np.full((1, 1, 1, 64), -30.0, np.float32)
        mask[..., :n] = 0.0
        return {"input_ids": ids, "attention_mask": mask}
    if name == "ppocr-cls":
        return {"x": rng.uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32)}
    if name == "silero-vad":
        return {"input": rng.uniform(-1, 1, (1, 576)).astype(np.float32),
                "state": rng.uniform(-1, 1, (2, 1, 128)).astype(np.float32),
                "sr": np.array(16000, np.int64)}
    raise KeyError(name)


def compiled_model(name: str, folder: Path):
    """The model baked (exact profile), written, read back with verify="full", compiled."""
    graph, bindings = import_onnx(fetch(name), input_shapes=INPUT_SHAPES.get(name))
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    path = folder / f"{name}.rlx"
    write_rlx(path, file)
    return Session().compile(read_rlx(path, verify="full").into_runtime_graph())


def run_threads(compiled, name: str, threads: int, calls: int) -> list[str]:
    """Problems found (empty: every threaded result equals the serial one)."""
    inputs = [feeds(name, seed) for seed in range(DISTINCT_INPUTS)]
    serial = [compiled.run(f) for f in inputs]
    problems: list[str] = []
    barrier = threading.Barrier(threads)

    def worker(t: int) -> None:
        barrier.wait()  # all threads start together, to overlap as much as possible
        for call in range(calls):
            k = (t + call) % DISTINCT_INPUTS
            try:
                got = compiled.run(inputs[k])
            except Exception as err:  # noqa: BLE001  (reported, not raised: the thread goes on)
                problems.append(f"thread {t} call {call}: {type(err).__name__}: {err}")
                continue
            if not all(a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
                       for a, b in zip(got, serial[k])):
                problems.append(f"thread {t} call {call}: differs from the serial result")

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return problems


def weights_artifact(path: Path, megabytes: int) -> int:
    """A MatMul over a `megabytes` MiB weight, whose run reads every weight page."""
    k = int(np.sqrt((megabytes << 20) / 4))
    g = Graph("shared")
    x = g.input("x", Shape((1, k)))
    w = g.constant(np.random.default_rng(0).standard_normal((k, k), dtype=np.float32))
    g.set_outputs([g.matmul(x, w)])
    write_rlx(path, RlxFile.from_baked(g, []))
    return 4 * k * k


CHILD = """
import json, sys
from benchmarks.common import proc_status
from rlx.artifact import read_rlx
from rlx.runtime import Session
from tests.hardening import harness

def mapping(path):
    # Rss and Pss (bytes) of the mappings of `path` in /proc/self/smaps
    out, mine = {"Rss": 0, "Pss": 0}, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5:
                mine = line.rstrip().endswith(path)
            elif mine and head[0].rstrip(":") in out:
                out[head[0].rstrip(":")] += int(head[1]) * 1024
    return out

before = proc_status()
compiled = Session().compile(read_rlx(sys.argv[1], verify="full").into_runtime_graph())
compiled.run(harness.feeds_for(compiled.input_shapes))
after = proc_status()
print(json.dumps({k: after[k] - before[k] for k in ("RssAnon", "RssFile")}), flush=True)
sys.stdin.readline()  # every child has its pages mapped now
print(json.dumps(mapping(sys.argv[1])), flush=True)
"""


def run_processes(path: Path, processes: int) -> list[dict]:
    """Per child: RssAnon/RssFile growth, then the artifact mapping's Rss/Pss measured while
    all children hold it."""
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(path)], cwd=ROOT, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                for _ in range(processes)]
    growth = [json.loads(child.stdout.readline()) for child in children]
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    mapped = [json.loads(child.stdout.readline()) for child in children]
    for child in children:
        child.wait()
    return [{**g, **{f"map_{k}": v for k, v in m.items()}} for g, m in zip(growth, mapped)]
