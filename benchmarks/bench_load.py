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
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import WORK, mib, run_probe, summarize_load  # noqa: E402
from rlx import MemoryMode  # noqa: E402
from tests.real_models import fetch  # noqa: E402


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
    """One exact-profile artifact per memory mode: path, file size, unique weight bytes +
    header."""
    folder = WORK / "load" / name
    folder.mkdir(parents=True, exist_ok=True)
    baked = checked(run_probe("bake", source=str(onnx_path), profile="exact",
                              memories=[m.value for m in MemoryMode], out_dir=str(folder),
                              min_calls=1, min_seconds=0.0))
    return {mode: (Path(m["path"]), m["file_bytes"], m["unique_weight_bytes"] + m["header_bytes"])
            for mode, m in baked["modes"].items()}


def checked(result: dict) -> dict:
    if "error" in result:
        raise RuntimeError(f"measurement failed: {result['error']}")
    return result


def measure(runtime: str, path: Path, repeat: int) -> dict:
    return summarize_load([checked(run_probe("load", runtime=runtime, path=str(path)))
                           for _ in range(repeat)])


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
        ort_m = measure("onnxruntime", onnx_path, args.repeat)
        weights = onnx_path.stat().st_size
        rows = [("onnxruntime", onnx_path.stat().st_size, ort_m)]
        for mode, (path, size, unique) in bake_modes(onnx_path, name).items():
            rows.append((f"rlx {mode}", size, measure("rlx", path, args.repeat)))
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
