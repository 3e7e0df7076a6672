"""Where OpenVINO's time goes, per kind of layer: plain f32, its default precision, and rlx
fast as it runs (issue 32: "for any miss, where the time goes").

`python -m benchmarks.layer_time [FOLDER] [--models a,b] [--threads 1,2] [--calls 40]`
bakes each model with `--profile fast` as `benchmarks.fast_ratio` does (calibrated on its
seeds, reusing FOLDER's file when there is one), then runs each runner in a fresh process
with OpenVINO's per-node performance counters on: the median time of every executed node
over `calls` runs, summed per layer kind and the precision its kernel ran in. rlx fast is
the model rlx compiled (`rlx.load(..., engine="openvino", precision="fast")`), compiled
again at the feed's shapes (as the engine runs it) with the same precision hint, threads
and the counters on.

The kinds are a rule over the executed graph: an image conv (<= 4 input channels), a
depthwise conv (OpenVINO's `dw` kernel), a conv on a 1x1 map (squeeze-excite, a conv head),
a pointwise (1x1) conv split at 64 input channels (fewer: `rlx.baking.int8.MIN_REDUCTION`
keeps it out of the int8 plan) and other convs; every other node by its layer type in the
executed graph (FullyConnected, Reorder: layout and precision conversions, Subgraph:
fused elementwise ops, ...). The node times are wall time inside the run,
so a busy machine inflates them all: compare shares, and the rows of one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.common import WORK, in_fresh_process

__all__ = ["layer_kind", "main", "table"]

RUNNERS = ("ov-f32", "ov-default", "rlx-fast[openvino]")
CHILD = "from benchmarks.layer_time import child; child()"
NARROW = 64  # input channels under which a 1x1 conv is narrow (module doc)


def layer_kind(layer_type: str, exec_type: str, in_shape: list[int],
               out_shape: list[int]) -> str:
    """The kind of an executed node (module doc), from the executed graph's layer type,
    the kernel OpenVINO ran it with and its first input's and output's static shapes."""
    if layer_type != "Convolution" or len(in_shape) < 3:
        return layer_type
    if "_dw_" in exec_type:
        return "depthwise conv"
    if in_shape[1] <= 4:
        return "image conv"
    if all(d == 1 for d in out_shape[2:]):
        return "conv on a 1x1 map"
    if "1x1" in exec_type:
        return "pointwise conv" + (f" < {NARROW} ch" if in_shape[1] < NARROW else "")
    return "other conv"


def _precision(exec_type: str) -> str:
    return exec_type.rsplit("_", 1)[-1].lower()


def _compiled(kind: str, onnx_path: str, rlx_path: str, threads: int, feeds: dict
              ) -> tuple[Any, Any, Any]:
    """The compiled model with performance counters, one infer request for it, and the
    rlx model whose mapped weights it computes on (None for plain OpenVINO): keep it. rlx's
    model at the shapes of `feeds`, as its engine runs it."""
    import openvino as ov

    config = {"INFERENCE_NUM_THREADS": str(threads), "PERFORMANCE_HINT": "LATENCY",
              "NUM_STREAMS": "1", "ENABLE_CPU_PINNING": "NO", "PERF_COUNT": "YES"}
    if kind.startswith("ov-"):
        if kind == "ov-f32":
            config["INFERENCE_PRECISION_HINT"] = "f32"
        compiled = ov.Core().compile_model(onnx_path, "CPU", config)
        return compiled, compiled.create_infer_request(), None
    import rlx

    model = rlx.load(rlx_path, engine="openvino", threads=threads, precision="fast")
    runner = model.runner
    hint = runner.compiled.get_property("INFERENCE_PRECISION_HINT")
    config["INFERENCE_PRECISION_HINT"] = hint.get_type_name()
    config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = str(
        runner.compiled.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE"))
    compiled = ov.Core().compile_model(runner.fixed_model(runner.input_shapes(feeds)), "CPU",
                                       config)
    request = compiled.create_infer_request()
    for name, array in runner.served.items():
        request.set_tensor(name, ov.Tensor(array, shared_memory=True))
    return compiled, request, model


def _kinds(compiled: Any) -> dict[str, tuple[str, list[int], list[int]]]:
    """Executed node name -> (layer type, first input shape, output shape)."""
    found = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        shapes = [op.input(0).get_partial_shape() if op.get_input_size() else None,
                  op.output(0).get_partial_shape() if op.get_output_size() else None]
        dims = [[d.get_length() if d.is_static else 0 for d in s] if s is not None
                and s.rank.is_static else [] for s in shapes]
        found[op.get_friendly_name()] = (op.get_rt_info()["layerType"].astype(str), *dims)
    return found


def child() -> None:
    """In a fresh process (argv: runner, model, onnx, rlx, threads, calls): the p50 of the
    run and the ms per (kind, precision), as JSON."""
    from benchmarks.fast_ratio import HELD_OUT, _feeds

    kind, name, onnx_path, rlx_path, threads, calls = sys.argv[1:7]
    given = _feeds(name, onnx_path)(HELD_OUT[0])
    compiled, request, _model = _compiled(kind, onnx_path, rlx_path, int(threads), given)
    feeds = {k: v for k, v in given.items() if any(k in i.get_names() for i in compiled.inputs)}
    for _ in range(3):
        request.infer(feeds)
    per_node: dict[str, list[float]] = defaultdict(list)
    kernels: dict[str, str] = {}
    walls = []
    for _ in range(int(calls)):
        start = time.perf_counter()
        request.infer(feeds)
        walls.append(time.perf_counter() - start)
        for info in request.get_profiling_info():
            if info.status.name == "EXECUTED":
                per_node[info.node_name].append(info.real_time.total_seconds() * 1e3)
                kernels[info.node_name] = info.exec_type
    shapes = _kinds(compiled)
    ms: dict[str, float] = defaultdict(float)
    for node, times in per_node.items():
        layer, ins, outs = shapes.get(node, ("", [], []))
        key = f"{layer_kind(layer, kernels[node], ins, outs)} [{_precision(kernels[node])}]"
        ms[key] += statistics.median(times)
    print(json.dumps({"p50_ms": statistics.median(walls) * 1e3, "ms": ms}))


def table(name: str, threads: int, results: dict[str, dict]) -> str:
    """A markdown table: one row per layer kind, per runner its ms, share of the summed
    node times and the precisions its kernels ran in."""
    cells: dict[str, dict[str, list]] = defaultdict(dict)  # kind -> runner -> [ms, precs]
    for runner, result in results.items():
        for key, ms in result["ms"].items():
            kind, precision = key[:-1].rsplit(" [", 1)
            cell = cells[kind].setdefault(runner, [0.0, []])
            cell[0] += ms
            cell[1].append(precision)
    totals = {runner: sum(r["ms"].values()) for runner, r in results.items()}
    order = sorted(cells, key=lambda k: -max(c[0] / totals[r] for r, c in cells[k].items()))
    lines = [f"### {name}, {threads} thread(s): " + ", ".join(
        f"{runner} p50 {r['p50_ms']:.2f} ms (nodes {totals[runner]:.2f})"
        for runner, r in results.items()), "",
        "| layer | " + " | ".join(f"{r} ms | share | runs in" for r in results) + " |",
        "|---|" + "---|---|---|" * len(results)]
    for kind in order:
        row = [f"{c[0]:.3f} | {c[0] / totals[r]:.1%} | {'+'.join(sorted(c[1]))}"
               if (c := cells[kind].get(r)) else "- | - | -" for r in results]
        lines.append(f"| {kind} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from benchmarks.fast_ratio import _bake, _synthetic
    from tests.real_models import MODELS, fetch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, nargs="?", default=WORK / "layers")
    p.add_argument("--models", default=",".join(MODELS), help="MODELS.md names ('' for none)")
    p.add_argument("--synthetic", default="", help="as benchmarks.fast_ratio's")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--calls", type=int, default=40)
    args = p.parse_args(argv)
    args.folder.mkdir(parents=True, exist_ok=True)
    sources = [(name, fetch(name)) for name in args.models.split(",") if name]
    sources += [(spec, _synthetic(spec, args.folder)) for spec in args.synthetic.split(",")
                if spec]
    for name, onnx_path in sources:
        rlx_path = args.folder / f"{onnx_path.stem}.fast.rlx"
        if not rlx_path.exists():
            _bake(name, onnx_path, args.folder)
        for threads in (int(t) for t in args.threads.split(",")):
            results = {kind: in_fresh_process(CHILD, kind, name, str(onnx_path), str(rlx_path),
                                              str(threads), str(args.calls))
                       for kind in RUNNERS}
            print(table(name, threads, results), "\n", flush=True)


if __name__ == "__main__":
    main()
