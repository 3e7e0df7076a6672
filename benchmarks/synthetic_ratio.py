"""Same-process p50 of rlx's numpy engine against onnxruntime at one thread on synthetic
models built with onnx.helper: recurrent stacks and small CNNs, whose speed is the numpy
engine's per-step and per-node cost rather than BLAS.

`python -m benchmarks.synthetic_ratio [MODEL...]` bakes each model (exact profile) into a
temporary folder, loads it with `rlx.load(engine="numpy", threads=1)`, and runs it and
onnxruntime (one intra-op thread) on the same feeds in turns for `--seconds`, three calls a
turn, timed by the thread's CPU time (another process taking the core does not count), as
`benchmarks.ab_ratio` does for the real models. Models: gru (2 GRU layers, hidden 256, 50
steps, linear_before_reset 1), gru-lbr0, bigru (bidirectional), kws (a DS-CNN keyword
spotter on a 49 x 10 MFCC map), tiny (conv, pool, gemm, softmax on 10 x 10).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = ["main", "MODELS"]


def _weights(rng, inits: list, name: str, shape: tuple, scale: float) -> str:
    from onnx import numpy_helper

    inits.append(numpy_helper.from_array(
        (rng.standard_normal(shape) * scale).astype(np.float32), name))
    return name


def _model(nodes: list, inits: list, name: str, shape: list):
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(
            nodes[-1].output[0], TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def gru_stack(lbr: int = 1, direction: str = "forward", hidden: int = 256, layers: int = 2):
    """GRU layers over [50, 1, hidden], each output [seq, dirs, batch, h] made [seq, batch,
    dirs * h] for the next (a seq2seq encoder's shape)."""
    from onnx import helper

    rng, nodes, inits, x = np.random.default_rng(0), [], [], "x"
    dirs = 2 if direction == "bidirectional" else 1
    for i in range(layers):
        width = hidden if i == 0 else hidden * dirs
        w = _weights(rng, inits, f"w{i}", (dirs, 3 * hidden, width), 0.05)
        r = _weights(rng, inits, f"r{i}", (dirs, 3 * hidden, hidden), 0.05)
        b = _weights(rng, inits, f"b{i}", (dirs, 6 * hidden), 0.05)
        nodes += [helper.make_node("GRU", [x, w, r, b], [f"y{i}"], hidden_size=hidden,
                                   linear_before_reset=lbr, direction=direction),
                  helper.make_node("Transpose", [f"y{i}"], [f"t{i}"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", [f"t{i}", "shape"], [f"o{i}"])]
        x = f"o{i}"
    inits.append(helper.make_tensor("shape", 7, [3], [0, 0, -1]))
    return _model(nodes, inits, "gru", [50, 1, hidden]), (50, 1, hidden)


def kws(blocks: int = 4, channels: int = 64):
    """Conv 10x4 / 2, then depthwise 3x3 + pointwise blocks, mean pool, 12 classes."""
    from onnx import helper

    rng, inits, c = np.random.default_rng(4), [], channels
    nodes = [helper.make_node("Conv", ["x", _weights(rng, inits, "w0", (c, 1, 10, 4), 0.2)],
                              ["c0"], strides=[2, 2], pads=[4, 1, 5, 2]),
             helper.make_node("Relu", ["c0"], ["r0"])]
    x = "r0"
    for i in range(blocks):
        dw = _weights(rng, inits, f"dw{i}", (c, 1, 3, 3), 0.3)
        pw = _weights(rng, inits, f"pw{i}", (c, c, 1, 1), 0.15)
        nodes += [helper.make_node("Conv", [x, dw], [f"d{i}"], group=c, pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"d{i}"], [f"dr{i}"]),
                  helper.make_node("Conv", [f"dr{i}", pw], [f"p{i}"]),
                  helper.make_node("Relu", [f"p{i}"], [f"pr{i}"])]
        x = f"pr{i}"
    nodes += [helper.make_node("GlobalAveragePool", [x], ["g"]),
              helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", _weights(rng, inits, "fc", (c, 12), 0.2)], ["l"]),
              helper.make_node("Softmax", ["l"], ["y"], axis=-1)]
    return _model(nodes, inits, "kws", [1, 1, 49, 10]), (1, 1, 49, 10)


def tiny():
    """Conv 3x3, relu, max pool 2x2, gemm, softmax: ~12 us on onnxruntime."""
    from onnx import helper

    rng, inits = np.random.default_rng(1), []
    nodes = [helper.make_node("Conv", ["x", _weights(rng, inits, "w", (8, 1, 3, 3), 0.3)],
                              ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", _weights(rng, inits, "fc", (200, 12), 0.1)], ["g"]),
             helper.make_node("Softmax", ["g"], ["y"], axis=-1)]
    return _model(nodes, inits, "tiny", [1, 1, 10, 10]), (1, 1, 10, 10)


MODELS: dict[str, Callable] = {
    "gru": gru_stack, "gru-lbr0": functools.partial(gru_stack, lbr=0),
    "bigru": functools.partial(gru_stack, direction="bidirectional"), "kws": kws, "tiny": tiny}


def _ratio(name: str, folder: Path, seconds: float) -> str:
    import onnx
    import onnxruntime as ort
    from threadpoolctl import threadpool_limits

    import rlx
    from rlx import BakeOptions, bake
    from rlx.artifact import write_rlx
    from rlx.onnx import import_onnx

    model, shape = MODELS[name]()
    onnx.save(model, folder / f"{name}.onnx")
    file, _ = bake(*import_onnx(folder / f"{name}.onnx"), BakeOptions.from_profile("exact"))
    write_rlx(folder / f"{name}.rlx", file)
    ours = rlx.load(folder / f"{name}.rlx", engine="numpy", threads=1)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    theirs = ort.InferenceSession(str(folder / f"{name}.onnx"), opts,
                                  providers=["CPUExecutionProvider"])
    feeds = {"x": np.random.default_rng(2).standard_normal(shape).astype(np.float32)}
    runs = {"rlx": functools.partial(ours.run, feeds),
            "ort": functools.partial(theirs.run, None, feeds)}
    diff = float(np.abs(runs["rlx"]()[0] - runs["ort"]()[0]).max())
    times: dict[str, list[float]] = {key: [] for key in runs}
    with threadpool_limits(1):
        end = time.perf_counter() + seconds
        while not times["ort"] or time.perf_counter() < end:  # one turn at least
            for key, run in runs.items():
                for _ in range(3):
                    start = time.thread_time()
                    run()
                    times[key].append(time.thread_time() - start)
    r, o = (statistics.median(times[key]) * 1e3 for key in runs)
    return (f"{name:9s} rlx numpy {r:8.3f} ms  onnxruntime {o:8.3f} ms  ratio {r / o:5.2f}  "
            f"max|diff| {diff:.1e}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", help=f"of {', '.join(MODELS)} (default: all)")
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args(argv)
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models or list(MODELS):
            print(_ratio(name, Path(tmp), args.seconds), flush=True)


if __name__ == "__main__":
    main()
