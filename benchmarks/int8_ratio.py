"""int8 models through rlx and plain onnxruntime: file size and p50 latency.

`python -m benchmarks.int8_ratio FOLDER [--model t5] [--seq 8 ...]` builds a synthetic
model of `tests.int8_models`: `t5`, the T5-style decoder (d_model 512, 32k-word output
layer, quantised by onnxruntime's `quantize_dynamic` to MatMulInteger +
DynamicQuantizeLinear; --seq is its sequence length), or the small CNN quantised three ways
(--seq is its batch): `cnn-dynamic` (ConvInteger, `quantize_dynamic`), `cnn-qoperator`
(QLinearConv / QLinearMatMul) and `cnn-qdq` (QDQ pairs, `quantize_static`); or
`--variant MODEL.VARIANT`, a variant of a real model (`tests.variants`, e.g.
`ppocr-cls.static-qop`) on its seeded feed (--seq is then the feed's seed). It bakes it
with the exact profile into FOLDER, prints the `.rlx` / ONNX bytes, then runs plain
onnxruntime, plain OpenVINO (on the ONNX file, rlx's exact settings) and rlx's numpy,
onnxruntime and OpenVINO engines in turns at --threads threads (1) for a few seconds per
size, and prints each p50 and its ratio to onnxruntime's, with the largest output
difference from it. At one thread a turn is three calls and the clock the thread's CPU time
(another process taking the core does not count); with more, a turn is `--turn` seconds
after two untimed calls (`benchmarks.ab_ratio` says why) on the wall clock. OpenVINO runs
its requests on a thread of its own: always wall time.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from pathlib import Path

__all__ = ["MODELS", "main"]

MODELS = ("t5", "cnn-dynamic", "cnn-qoperator", "cnn-qdq")


def _onnx(folder: Path, model: str) -> Path:
    from onnx import save

    from tests.int8_models import cnn, quantized, quantized_static, t5_decoder

    if model == "t5":
        return quantized(t5_decoder(), folder, "t5_int8")
    if model == "cnn-dynamic":
        from onnxruntime.quantization import quantize_dynamic

        source, target = folder / "cnn.f32.onnx", folder / "cnn_dynamic.onnx"
        save(cnn(), source)
        quantize_dynamic(source, target, op_types_to_quantize=["Conv", "MatMul"])
        return target
    calibration = [_feeds(model, 1, seed) for seed in range(4)]
    return quantized_static(cnn(), folder, model.replace("-", "_"), calibration,
                            qdq=model == "cnn-qdq")


def _feeds(model: str, size: int, seed: int = 9) -> dict:
    """The decoder's feeds at sequence length `size`, a CNN's batch of `size` images, or a
    real model's feed of seed `size`."""
    import numpy as np

    from tests.int8_models import decoder_feeds
    from tests.real_models import FEEDS

    if "." in model:
        return FEEDS[model.split(".")[0]](size)
    if model == "t5":
        return decoder_feeds(size)
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((size, 3, 16, 16)).astype(np.float32)}


def _bake(folder: Path, model: str) -> tuple[Path, Path]:
    from rlx import BakeOptions, BakeProfile, bake
    from rlx.artifact import write_rlx
    from rlx.onnx import import_onnx

    if "." in model:
        from tests.real_models import fetch, import_kwargs
        from tests.variants import variant_path

        name, variant = model.split(".", 1)
        onnx_path = variant_path(name, variant)
        graph, bindings = import_onnx(onnx_path, **import_kwargs(fetch(name)))
    else:
        onnx_path = _onnx(folder, model)
        graph, bindings = import_onnx(onnx_path)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    rlx_path = folder / onnx_path.with_suffix(".rlx").name
    write_rlx(rlx_path, file)
    return onnx_path, rlx_path


def _runners(onnx_path: Path, rlx_path: Path, threads: int) -> dict:
    import onnxruntime as ort

    import rlx

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    plain = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    runners = {"ort": lambda feeds: plain.run(None, feeds)[0]}
    import openvino as ov

    config = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
              "INFERENCE_NUM_THREADS": str(threads), "PERFORMANCE_HINT": "LATENCY"}
    try:  # OpenVINO has no com.microsoft ops (a QOperator model's QLinear pooling)
        compiled = ov.Core().compile_model(str(onnx_path), "CPU", config)
        request = compiled.create_infer_request()
        runners["openvino"] = lambda feeds: request.infer(feeds)[compiled.outputs[0]]
    except RuntimeError as err:
        print(f"plain openvino cannot run {onnx_path.name}: {' '.join(str(err).split())[-90:]}")
    for name in ("numpy", "onnxruntime", "openvino"):
        try:
            model = rlx.load(rlx_path, engine=name, threads=threads)
        except RuntimeError as err:  # OpenVINO refusing a model
            print(f"rlx[{name}] cannot run {rlx_path.name}: {' '.join(str(err).split())[-90:]}")
            continue
        runners[f"rlx[{name}]"] = lambda feeds, m=model: m.run(feeds)[0]
    return runners


def main(argv: list[str] | None = None) -> None:
    import numpy as np
    from threadpoolctl import threadpool_limits

    from benchmarks.ab_ratio import turn

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--model", choices=MODELS, default="t5")
    p.add_argument("--variant", help="MODEL.VARIANT of tests.variants, instead of --model")
    p.add_argument("--seq", type=int, nargs="+", default=[8])
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--turn", type=float, default=0.5,
                   help="seconds each runtime runs in turn, with more than one thread")
    args = p.parse_args(argv)
    args.folder.mkdir(parents=True, exist_ok=True)
    model = args.variant or args.model
    onnx_path, rlx_path = _bake(args.folder, model)
    size = rlx_path.stat().st_size / onnx_path.stat().st_size
    print(f"exact .rlx {rlx_path.stat().st_size:,} B / ONNX {onnx_path.stat().st_size:,} B"
          f" = {size:.3f}")
    runners = _runners(onnx_path, rlx_path, args.threads)
    for seq in args.seq:
        feeds = _feeds(model, seq)
        with threadpool_limits(args.threads):
            want = runners["ort"](feeds)
            diffs = {}
            for key, run in list(runners.items()):
                try:
                    got = run(feeds)
                except RuntimeError as err:  # OpenVINO failing at its first request
                    print(f"{key} fails: {' '.join(str(err).split())[-90:]}")
                    del runners[key]
                    continue
                if got.shape != want.shape:
                    print(f"{key} gives shape {got.shape}, onnxruntime {want.shape}")
                    del runners[key]
                    continue
                diffs[key] = float(np.abs(got - want).max())
            times: dict[str, list[float]] = {k: [] for k in runners}
            end = time.perf_counter() + args.seconds
            while time.perf_counter() < end:
                for key, run in runners.items():
                    clock = time.perf_counter if "openvino" in key or args.threads > 1 \
                        else time.thread_time
                    times[key] += turn(functools.partial(run, feeds), clock,
                                       args.turn if args.threads > 1 else None)
        base = statistics.median(times["ort"])
        for key, values in times.items():
            p50 = statistics.median(values)
            print(f"seq {seq:3d} {key:18s} {p50 * 1e3:8.2f} ms  x{p50 / base:5.2f}  "
                  f"max |diff| {diffs[key]:.3g}")


if __name__ == "__main__":
    main()
