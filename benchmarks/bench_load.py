"""Load benchmark (issue 4): file size, time to a compiled graph and memory at load, for each
memory mode, beside onnxruntime's InferenceSession on the same ONNX file, in one run.

    .venv/bin/python benchmarks/bench_load.py [--repeat 3]

Every measurement runs in its own process. Memory is read from /proc/self/status: peak RSS
(VmHWM) and the growth of anonymous (heap) and file-backed (mapped file) resident memory
between "libraries imported" and "ready to run". Targets: anonymous growth <= 5% of the
weight bytes in every mode; time to ready <= 0.25x onnxruntime's session creation; compact
file <= 1.01x (unique weight bytes + header).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import WORK, in_fresh_process, mib  # noqa: E402
from tests.real_models import fetch  # noqa: E402

RLX_LOAD = """
import json, sys, time
from benchmarks.common import proc_status
from rlx.artifact import read_rlx
from rlx.runtime import Session
before = proc_status()
start = time.perf_counter()
file = read_rlx(sys.argv[1])
compiled = Session().compile(file.into_runtime_graph())
ready = time.perf_counter() - start
after = proc_status()
print(json.dumps({"seconds": ready, "before": before, "after": after}))
"""

ORT_LOAD = """
import json, sys, time
from benchmarks.common import proc_status
import onnxruntime as ort
before = proc_status()
start = time.perf_counter()
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
ready = time.perf_counter() - start
after = proc_status()
print(json.dumps({"seconds": ready, "before": before, "after": after}))
"""


def synthetic_onnx(path: Path, width: int = 2048, layers: int = 8) -> Path:
    """An MLP of `layers` dense [width, width] layers (128 MiB of f32 weights at defaults)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        b = np.zeros(width, np.float32) + 0.01 * i
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"h{i}"])]
        x = f"h{i}"
    graph = helper.make_graph(
        nodes, "synthetic_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def bake_modes(onnx_path: Path, name: str) -> dict[str, tuple[Path, int, int]]:
    """One exact-profile artifact per memory mode: path, file size, unique weight bytes."""
    from rlx.artifact import write_rlx
    from rlx.artifact.writer import encode_rlx
    from rlx.bake import BakeOptions, MemoryMode, bake
    from rlx.frontends.onnx import import_onnx

    graph, bindings = import_onnx(onnx_path)
    out = {}
    for mode in MemoryMode:
        file, _ = bake(graph, bindings, BakeOptions().replace(memory=mode))
        path = WORK / f"{name}-{mode.value}.rlx"
        write_rlx(path, file)
        header, _ = encode_rlx(file)
        unique = sum(w.nbytes for w in file.weights) + sum(
            n.op.nbytes for n in file.graph.nodes() if type(n.op).__name__ == "Constant"
            and not any(w.node_id == n.id for w in file.weights))
        out[mode.value] = (path, path.stat().st_size, unique + len(header))
    return out


def measure(code: str, path: Path, repeat: int) -> dict:
    runs = [in_fresh_process(code, str(path)) for _ in range(repeat)]
    best = min(runs, key=lambda r: r["seconds"])
    grow = {k: best["after"][k] - best["before"][k] for k in ("RssAnon", "RssFile")}
    return {"seconds": statistics.median(r["seconds"] for r in runs),
            "peak": best["after"]["VmHWM"], **grow}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    models = {"minilm-l3": fetch("minilm-l3"),
              "synthetic-128MiB": synthetic_onnx(WORK / "synthetic.onnx")}
    print("| model | runtime | file MiB | ready ms | x ORT time | peak RSS MiB | "
          "anon growth MiB | anon / weights | file-backed growth MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, onnx_path in models.items():
        ort_m = measure(ORT_LOAD, onnx_path, args.repeat)
        weights = onnx_path.stat().st_size
        rows = [("onnxruntime", onnx_path.stat().st_size, ort_m)]
        for mode, (path, size, unique) in bake_modes(onnx_path, name).items():
            rows.append((f"rlx {mode}", size, measure(RLX_LOAD, path, args.repeat)))
            if mode == "compact":
                compact_ratio = size / unique
        for label, size, m in rows:
            print(f"| {name} | {label} | {mib(size)} | {m['seconds'] * 1e3:.1f} | "
                  f"{m['seconds'] / ort_m['seconds']:.3f} | {mib(m['peak'])} | "
                  f"{mib(m['RssAnon'])} | {m['RssAnon'] / weights:.1%} | {mib(m['RssFile'])} |")
        print(f"| {name} | compact file / (unique weight bytes + header) | "
              f"{compact_ratio:.4f} | | | | | | |")


if __name__ == "__main__":
    main()
