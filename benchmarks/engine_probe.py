"""One engine measurement in a fresh interpreter (issue 12), for benchmarks/bench_engines:

    python -c "from benchmarks.engine_probe import main; main()" JSON

Times from before any heavy import: `first_result_seconds` is import + load + first run
(the interpreter's own start-up, the same for every runner, is left out). Anonymous RSS
growth is measured from just before the load (runtime imported) to after the load
(`anon_load`) and to after the first run (`anon_growth`, which adds the first run's
activation buffers and arenas).
With `latency`, the probe then times repeated calls at `threads` intra-op threads and
compares the last outputs with the reference's (plain onnxruntime, f32).

Runners: rlx:<engine>:<precision> (rlx.load; onnxruntime maps its saved prepacked model;
with `example`, auto measures on the probe's feeds),
rlx:onnxruntime-off:exact (the same with prepacking off: weights straight from the .rlx),
ort (plain onnxruntime on the .onnx file), ort:nospin (the same with its intra-op threads'
spinning off: `session.intra_op.allow_spinning` 0),
ov:f32 and ov:default (plain OpenVINO on the .onnx file, f32 hint / its default).
"""

from __future__ import annotations

import json
import sys
import time

START = time.perf_counter()


def _anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def _ov_config(threads: int, f32: bool) -> dict:
    config = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
              "INFERENCE_NUM_THREADS": str(threads)}
    if f32:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    return config


_PRE_IMPORTS = {
    "numpy": ("rlx.engines.model", "rlx.engines.numpy_engine"),
    # onnx (~10 MiB of anonymous memory for its protobuf classes) is imported by the
    # export at load; it is counted in time to first result, not in growth at load
    "onnxruntime": ("rlx.engines.model", "rlx.engines.onnxruntime_engine", "onnx"),
    "openvino": ("rlx.engines.model", "rlx.engines.openvino_engine", "onnx"),
    "auto": ("rlx.engines.model", "rlx.engines.auto", "rlx.engines.onnxruntime_engine"),
}


def _build(runner: str, args: dict):
    """(run(feeds) -> list of arrays, details)."""
    threads = args["threads"]
    if runner.startswith("rlx:"):
        _, engine, precision = runner.split(":")
        prepack = "mapped"
        if engine == "onnxruntime-off":
            prepack, engine = "off", "onnxruntime"
        import importlib

        import rlx

        # what this engine imports anyway, before the baseline (as plain runners do); the
        # export (and onnx) is part of loading, except for auto's warm path, which skips it
        for module in _PRE_IMPORTS.get(engine, ()):
            importlib.import_module(module)
        before = _anon()
        example = _feeds(args["feeds"]) if args.get("example") else None
        model = rlx.load(args["rlx"], engine=engine, precision=precision, threads=threads,
                         cache_dir=args["cache"], example=example, prepack=prepack)
        return (lambda feeds: model.run(feeds)), before, {"engine": model.engine,
                                                          "precision": model.precision}
    if runner in ("ort", "ort:nospin"):
        import onnxruntime as ort

        before = _anon()
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        if runner == "ort:nospin":
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(args["onnx"], so, providers=["CPUExecutionProvider"])
        return (lambda feeds: session.run(None, feeds)), before, {}
    import openvino as ov

    before = _anon()
    core = ov.Core()
    compiled = core.compile_model(args["onnx"], "CPU", _ov_config(threads, runner == "ov:f32"))
    request = compiled.create_infer_request()

    def run(feeds):
        return [r.copy() for r in request.infer(feeds).values()]

    return run, before, {}


def _feeds(path: str) -> dict:
    import numpy as np

    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def main() -> None:
    args = json.loads(sys.argv[1])
    import numpy as np

    feeds = _feeds(args["feeds"])
    run, before, details = _build(args["runner"], args)
    loaded = _anon()
    outputs = run(feeds)
    first = time.perf_counter() - START
    out = {"first_result_seconds": first, "anon_growth": _anon() - before,
           "anon_load": loaded - before, **details}
    if args.get("latency"):
        for _ in range(args["warmup"]):
            run(feeds)
        times: list[float] = []
        while len(times) < args["min_calls"] or sum(times) < args["min_seconds"]:
            t = time.perf_counter()
            outputs = run(feeds)
            times.append(time.perf_counter() - t)
        out["p50"] = float(np.median(times))
        out["calls"] = len(times)
    with np.load(args["reference"]) as ref:
        expected = [ref[k] for k in sorted(ref.files, key=lambda k: int(k[3:]))]
    accuracy = []
    for got, want in zip(outputs, expected):
        a = np.asarray(got, np.float64).ravel()
        b = np.asarray(want, np.float64).ravel()
        norm = float(np.linalg.norm(a) * np.linalg.norm(b))
        accuracy.append({"max_abs": float(np.max(np.abs(a - b))) if a.size else 0.0,
                         "cosine": float(a @ b / norm) if norm else 1.0,
                         "argmax_same": bool(a.size == 0 or np.argmax(a) == np.argmax(b))})
    out["accuracy"] = accuracy
    print(json.dumps(out))
