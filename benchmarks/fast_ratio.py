"""The fast profile against plain f32 engines (issue 32): latency, accuracy, plan, size.

`python -m benchmarks.fast_ratio [FOLDER] [--models a,b] [--threads 2] [--calls 20]` (`make
bench-fast`) bakes each MODELS.md model with `--profile fast`, calibrated on seeded feeds
1..4, into FOLDER (default: a new temporary folder), then in
a fresh process each, in interleaved rounds: plain onnxruntime f32, plain OpenVINO f32 and
OpenVINO's default precision on the ONNX file, and rlx fast on onnxruntime and on OpenVINO.
It prints per model the p50s and each fast ratio to min(plain onnxruntime, plain OpenVINO
f32), the held-out accuracy (seeds 100..103, never the calibration ones) of every fast run
against onnxruntime f32 on the original (worst cosine over outputs, argmax agreement of
class-score outputs), the plan's counts and the file size against the ONNX file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["main"]

CALIBRATION = (1, 2, 3, 4)
HELD_OUT = (100, 101, 102, 103)
RUNNERS = ("ort-f32", "ov-f32", "ov-default", "rlx-fast[onnxruntime]", "rlx-fast[openvino]")


def _bake(name: str, folder: Path) -> tuple[Path, Path, dict]:
    from rlx import BakeOptions, bake
    from rlx.artifact import write_rlx
    from rlx.onnx import import_onnx
    from tests.real_models import FEEDS, fetch, import_kwargs

    onnx_path = fetch(name)
    graph, bindings = import_onnx(onnx_path, **import_kwargs(onnx_path))
    opts = BakeOptions.from_profile("fast").replace(
        calibration=[FEEDS[name](seed) for seed in CALIBRATION])
    start = time.perf_counter()
    file, report = bake(graph, bindings, opts)
    seconds = time.perf_counter() - start
    path = folder / f"{name}.fast.rlx"
    write_rlx(path, file)
    plan = report.precision
    return onnx_path, path, {"bake_s": seconds, "plan": plan.summary if plan else "none",
                             "bytes": path.stat().st_size, "onnx_bytes": onnx_path.stat().st_size}


def _runner(kind: str, onnx_path: str, rlx_path: str, threads: int):
    """A callable running one feed on `kind` (in this process)."""
    if kind == "ort-f32":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
        return lambda feeds: session.run(None, feeds)
    if kind.startswith("ov-"):
        import openvino as ov

        config = {"INFERENCE_NUM_THREADS": str(threads), "PERFORMANCE_HINT": "LATENCY",
                  "NUM_STREAMS": "1"}
        if kind == "ov-f32":
            config["INFERENCE_PRECISION_HINT"] = "f32"
        compiled = ov.Core().compile_model(onnx_path, "CPU", config)
        request = compiled.create_infer_request()
        return lambda feeds: list(request.infer(feeds).values())
    import rlx

    engine = kind[kind.index("[") + 1:-1]
    model = rlx.load(rlx_path, engine=engine, threads=threads, precision="fast")
    return lambda feeds: model.run(feeds)


def _time(kind: str, name: str, onnx_path: str, rlx_path: str, threads: int, calls: int) -> None:
    """Child process: p50 of `calls` runs after 3 warm-up calls, as JSON on stdout."""
    from tests.real_models import FEEDS

    run = _runner(kind, onnx_path, rlx_path, threads)
    feeds = FEEDS[name](HELD_OUT[0])
    for _ in range(3):
        run(feeds)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - start)
    print(json.dumps({"p50_ms": statistics.median(times) * 1e3}))


def _latency(name: str, onnx_path: Path, rlx_path: Path, threads: int, calls: int,
             rounds: int) -> dict[str, float]:
    """p50 per runner: the median over `rounds` interleaved fresh processes (NaN for a
    runner that cannot run the model, whose last error line is printed)."""
    samples: dict[str, list[float]] = {k: [] for k in RUNNERS}
    for _ in range(rounds):
        for kind in RUNNERS:
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.fast_ratio", "--child", kind, name,
                 str(onnx_path), str(rlx_path), str(threads), str(calls)],
                capture_output=True, text=True)
            if out.returncode:
                print(f"  {kind} failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
                samples[kind].append(float("nan"))
                continue
            samples[kind].append(json.loads(out.stdout.strip().splitlines()[-1])["p50_ms"])
    return {k: statistics.median(v) for k, v in samples.items()}


def _accuracy(name: str, onnx_path: Path, rlx_path: Path) -> dict[str, dict]:
    """Worst cosine over outputs and feeds, and argmax agreement on class-score outputs, of
    each rlx fast engine against onnxruntime f32 on the original."""
    import rlx
    from rlx.baking.fast import class_score_outputs
    from rlx.baking.guard import compare_outputs
    from tests.real_models import FEEDS

    reference = _runner("ort-f32", str(onnx_path), "", 2)
    feeds = [FEEDS[name](seed) for seed in HELD_OUT]
    refs = [reference(f) for f in feeds]
    result = {}
    for engine in ("onnxruntime", "openvino"):
        model = rlx.load(rlx_path, engine=engine, precision="fast")
        names = [o.name for o in model.outputs]
        scores = class_score_outputs(model.file.graph)
        acc = compare_outputs(names, refs, [model.run(f) for f in feeds], scores)
        argmax = [a.argmax for a in acc if a.argmax is not None]
        result[engine] = {"cosine": min(a.cosine for a in acc),
                          "argmax": min(argmax) if argmax else None,
                          "precision": model.precision}
    return result


def main(argv: list[str] | None = None) -> None:
    from tests.real_models import MODELS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, nargs="?")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    args.folder = args.folder or Path(tempfile.mkdtemp(prefix="rlx-fast-"))
    args.folder.mkdir(parents=True, exist_ok=True)
    for name in args.models.split(","):
        onnx_path, rlx_path, baked = _bake(name, args.folder)
        p50 = _latency(name, onnx_path, rlx_path, args.threads, args.calls, args.rounds)
        best = float(np.nanmin([p50["ort-f32"], p50["ov-f32"]]))
        acc = _accuracy(name, onnx_path, rlx_path)
        print(f"{name}: plan {baked['plan']}; {baked['bytes']:,} bytes "
              f"({baked['bytes'] / baked['onnx_bytes']:.2f}x the ONNX); "
              f"bake {baked['bake_s']:.1f}s")
        print("  p50 ms: " + ", ".join(f"{k} {v:.2f}" for k, v in p50.items()))
        for engine in ("onnxruntime", "openvino"):
            a = acc[engine]
            argmax = "-" if a["argmax"] is None else f"{a['argmax']:.3f}"
            print(f"  rlx-fast[{engine}] ({a['precision']}): "
                  f"{p50[f'rlx-fast[{engine}]'] / best:.2f}x min(ort, ov f32), "
                  f"{p50[f'rlx-fast[{engine}]'] / p50['ov-default']:.2f}x ov default; "
                  f"held-out cosine {a['cosine']:.5f}, argmax {argmax}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        kind, name, onnx_path, rlx_path, threads, calls = sys.argv[2:8]
        _time(kind, name, onnx_path, rlx_path, int(threads), int(calls))
    else:
        main()
