"""The fast profile against plain f32 engines (issue 32): latency, accuracy, plan, size, memory.

`python -m benchmarks.fast_ratio [FOLDER] [--models a,b] [--threads 1,2] [--rounds 2]` (`make
bench-fast`) bakes each MODELS.md model with `--profile fast`, calibrated on seeded feeds
1..4, into FOLDER (default: a new temporary folder). Then, at each thread count, in a fresh
process each and in interleaved rounds: plain onnxruntime f32, plain OpenVINO f32 and
OpenVINO's default precision on the ONNX file, and rlx fast on onnxruntime and on OpenVINO;
each process reports its p50 and the anonymous RSS its load added. One markdown table row
per model, thread count and runner: p50, the ratio to min(plain onnxruntime, plain OpenVINO
f32), anonymous RSS at load, and the held-out accuracy (seeds 100..103, never the
calibration ones) against onnxruntime f32 on the original: worst cosine over outputs and
argmax agreement of class-score outputs. Per model, the plan's counts and the file size
against the ONNX file.

`--synthetic db_detector:size=320:widen=3,crnn:width=320` adds models built by
tests/baking/cnn_models.py (keyword arguments as integers), written into FOLDER, fed seeded
normalised images: architectures MODELS.md does not hold, checked by the same rules.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import in_fresh_process, mib, proc_status, time_calls

__all__ = ["main"]

CALIBRATION = (1, 2, 3, 4)
HELD_OUT = (100, 101, 102, 103)
PLAIN = ("ort-f32", "ov-f32")
RUNNERS = (*PLAIN, "ov-default", "rlx-fast[onnxruntime]", "rlx-fast[openvino]")
CHILD = "from benchmarks.fast_ratio import child; child()"
HEADER = ("| model | threads | runner | p50 ms | / min(ort, ov f32) | anon MiB at load | "
          "held-out cosine | argmax | runs in |\n|---|---|---|---|---|---|---|---|---|")


def _synthetic(spec: str, folder: Path) -> Path:
    """The ONNX file of `spec` (builder[:key=int]...) from tests/baking/cnn_models.py."""
    import onnx

    from tests.baking import cnn_models

    builder, *pairs = spec.split(":")
    kwargs = {k: int(v) for k, v in (pair.split("=") for pair in pairs)}
    path = folder / f"{spec.replace(':', '-').replace('=', '')}.onnx"
    if not path.exists():
        onnx.save(getattr(cnn_models, builder)(**kwargs)[0], path)
    return path


def _feeds(name: str, onnx_path: str | Path):
    """Seeded feeds of a MODELS.md model, or seeded images of a synthetic model's shape."""
    from tests.real_models import FEEDS

    if name in FEEDS:
        return FEEDS[name]
    import onnx

    from tests.baking.cnn_models import image_feeds

    (x,) = onnx.load(onnx_path, load_external_data=False).graph.input
    return image_feeds([d.dim_value for d in x.type.tensor_type.shape.dim])


def _bake(name: str, onnx_path: Path, folder: Path) -> tuple[Path, dict]:
    from rlx import BakeOptions, bake
    from rlx.artifact import write_rlx
    from rlx.onnx import import_onnx
    from tests.real_models import import_kwargs

    graph, bindings = import_onnx(onnx_path, **import_kwargs(onnx_path))
    feeds = _feeds(name, onnx_path)
    opts = BakeOptions.from_profile("fast").replace(
        calibration=[feeds(seed) for seed in CALIBRATION])
    start = time.perf_counter()
    file, report = bake(graph, bindings, opts)
    seconds = time.perf_counter() - start
    path = folder / f"{onnx_path.stem}.fast.rlx"
    write_rlx(path, file)
    plan = report.precision
    return path, {"bake_s": seconds, "plan": plan.summary if plan else "none",
                             "bytes": path.stat().st_size, "onnx_bytes": onnx_path.stat().st_size}


def _runner(kind: str, onnx_path: str, rlx_path: str, threads: int):
    """A callable running one feed on `kind` (in this process), and the precision it runs."""
    if kind == "ort-f32":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
        return (lambda feeds: session.run(None, feeds)), "f32"
    if kind.startswith("ov-"):
        import openvino as ov

        config = {"INFERENCE_NUM_THREADS": str(threads), "PERFORMANCE_HINT": "LATENCY",
                  "NUM_STREAMS": "1"}
        if kind == "ov-f32":
            config["INFERENCE_PRECISION_HINT"] = "f32"
        compiled = ov.Core().compile_model(onnx_path, "CPU", config)
        request = compiled.create_infer_request()
        precision = compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
        return (lambda feeds: list(request.infer(feeds).values())), precision
    import rlx

    engine = kind[kind.index("[") + 1:-1]
    model = rlx.load(rlx_path, engine=engine, threads=threads, precision="fast")
    return (lambda feeds: model.run(feeds)), model.precision


def child() -> None:
    """In a fresh process (argv: kind, model, onnx, rlx, threads, calls): the anonymous RSS
    the load added, and the p50 of `calls` runs after 3 warm-up calls, as JSON."""
    kind, name, onnx_path, rlx_path, threads, calls = sys.argv[1:7]
    before = proc_status()["RssAnon"]
    run, _ = _runner(kind, onnx_path, rlx_path, int(threads))
    anon = proc_status()["RssAnon"] - before
    feeds = _feeds(name, onnx_path)(HELD_OUT[0])
    for _ in range(3):
        run(feeds)
    times = time_calls(lambda: run(feeds), int(calls), 0.0)
    print(json.dumps({"p50_ms": statistics.median(times) * 1e3, "anon_load": anon}))


def _latency(name: str, onnx_path: Path, rlx_path: Path, threads: int, calls: int,
             rounds: int) -> dict[str, dict[str, float]]:
    """Per runner, p50 ms and anonymous RSS at load: medians over `rounds` interleaved fresh
    processes (NaN for a runner that cannot run the model, whose last error line is
    printed)."""
    samples: dict[str, list[dict]] = {k: [] for k in RUNNERS}
    for _ in range(rounds):
        for kind in RUNNERS:
            try:
                samples[kind].append(in_fresh_process(
                    CHILD, kind, name, str(onnx_path), str(rlx_path), str(threads), str(calls)))
            except RuntimeError as err:
                print(f"  {kind} failed: {str(err).strip().splitlines()[-1]}", file=sys.stderr)
    nan = float("nan")
    return {k: {field: statistics.median(s[field] for s in v) if v else nan
                for field in ("p50_ms", "anon_load")} for k, v in samples.items()}


def _accuracy(name: str, onnx_path: Path, rlx_path: Path) -> dict[str, dict]:
    """Worst cosine over outputs and feeds, argmax agreement on class-score outputs, and the
    precision that ran, of every runner against onnxruntime f32 on the original."""
    from rlx.artifact.open import open_artifact
    from rlx.baking.fast import class_score_outputs
    from rlx.baking.guard import compare_outputs

    reference, _ = _runner("ort-f32", str(onnx_path), "", 2)
    feeds = [_feeds(name, onnx_path)(seed) for seed in HELD_OUT]
    refs = [reference(f) for f in feeds]
    graph = open_artifact(rlx_path).graph
    names = [graph.node(o).name or f"out{o}" for o in graph.outputs]
    scores = class_score_outputs(graph)
    result = {}
    for kind in RUNNERS[1:]:
        try:
            run, precision = _runner(kind, str(onnx_path), str(rlx_path), 2)
            acc = compare_outputs(names, refs, [run(f) for f in feeds], scores)
        except Exception as err:  # noqa: BLE001 - a runner that cannot run the model
            print(f"  {kind} cannot run {name}: {str(err).strip().splitlines()[-1]}",
                  file=sys.stderr)
            continue
        argmax = [a.argmax for a in acc if a.argmax is not None]
        result[kind] = {"cosine": min(a.cosine for a in acc),
                        "argmax": min(argmax) if argmax else None, "precision": precision}
    return result


def _rows(name: str, threads: int, p50: dict, acc: dict) -> list[str]:
    best = float(np.nanmin([p50[k]["p50_ms"] for k in PLAIN]))
    rows = []
    for kind in RUNNERS:
        a = acc.get(kind)
        accuracy = ("(the reference) | | f32" if kind == "ort-f32" else "- | - | -") \
            if a is None else (
            f"{a['cosine']:.5f} | {'-' if a['argmax'] is None else format(a['argmax'], '.3f')}"
            f" | {a['precision']}")
        rows.append(f"| {name} | {threads} | {kind} | {p50[kind]['p50_ms']:.2f} | "
                    f"{p50[kind]['p50_ms'] / best:.2f} | {mib(p50[kind]['anon_load'])} | "
                    f"{accuracy} |")
    return rows


def main(argv: list[str] | None = None) -> None:
    from tests.real_models import MODELS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, nargs="?")
    p.add_argument("--models", default=",".join(MODELS), help="MODELS.md names ('' for none)")
    p.add_argument("--synthetic", default="", help="builder[:key=int]... of cnn_models")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    args.folder = args.folder or Path(tempfile.mkdtemp(prefix="rlx-fast-"))
    args.folder.mkdir(parents=True, exist_ok=True)
    sizes: list[str] = []
    print(HEADER, flush=True)
    from tests.real_models import fetch

    sources = [(name, fetch(name)) for name in args.models.split(",") if name]
    sources += [(spec, _synthetic(spec, args.folder)) for spec in args.synthetic.split(",")
                if spec]
    for name, onnx_path in sources:
        rlx_path, baked = _bake(name, onnx_path, args.folder)
        sizes.append(f"- {name}: plan {baked['plan']}; {baked['bytes']:,} bytes "
                     f"({baked['bytes'] / baked['onnx_bytes']:.2f}x the ONNX); "
                     f"bake {baked['bake_s']:.1f} s")
        acc = _accuracy(name, onnx_path, rlx_path)
        for threads in (int(t) for t in args.threads.split(",")):
            p50 = _latency(name, onnx_path, rlx_path, threads, args.calls, args.rounds)
            print("\n".join(_rows(name, threads, p50, acc)), flush=True)
    print("\n".join(["", *sizes]))


if __name__ == "__main__":
    main()
