"""An int8 T5-style decoder through rlx and plain onnxruntime: file size and p50 latency.

`python -m benchmarks.int8_ratio FOLDER [--seq 8 ...]` builds the synthetic decoder of
`tests.int8_models` (d_model 512, 32k-word output layer, quantised by onnxruntime's
`quantize_dynamic` to MatMulInteger + DynamicQuantizeLinear), bakes it with the exact
profile into FOLDER, prints the `.rlx` / ONNX bytes, then runs plain onnxruntime, plain
OpenVINO (on the ONNX file, rlx's exact settings) and rlx's numpy, onnxruntime and OpenVINO
engines in turns (three calls each) at one thread for a few seconds per sequence length,
and prints each p50 and its ratio to onnxruntime's, with the largest output difference
from it. The clock is the thread's CPU time (another process taking the core does not
count), except for OpenVINO, which runs its requests on a thread of its own: wall time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

__all__ = ["main"]


def _bake(folder: Path) -> tuple[Path, Path]:
    from rlx import BakeOptions, BakeProfile, bake
    from rlx.artifact import write_rlx
    from rlx.onnx import import_onnx
    from tests.int8_models import quantized, t5_decoder

    onnx_path = quantized(t5_decoder(), folder, "t5_int8")
    graph, bindings = import_onnx(onnx_path)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    rlx_path = folder / "t5_int8.rlx"
    write_rlx(rlx_path, file)
    return onnx_path, rlx_path


def _runners(onnx_path: Path, rlx_path: Path) -> dict:
    import onnxruntime as ort

    import rlx

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    plain = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    engines = {name: rlx.load(rlx_path, engine=name, threads=1)
               for name in ("numpy", "onnxruntime", "openvino")}
    import openvino as ov

    config = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
              "INFERENCE_NUM_THREADS": "1", "PERFORMANCE_HINT": "LATENCY"}
    compiled = ov.Core().compile_model(str(onnx_path), "CPU", config)
    request = compiled.create_infer_request()
    runners = {"ort": lambda feeds: plain.run(None, feeds)[0],
               "openvino": lambda feeds: request.infer(feeds)[compiled.outputs[0]]}
    runners.update({f"rlx[{name}]": (lambda feeds, m=model: m.run(feeds)[0])
                    for name, model in engines.items()})
    return runners


def main(argv: list[str] | None = None) -> None:
    import numpy as np
    from threadpoolctl import threadpool_limits

    from tests.int8_models import decoder_feeds

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--seq", type=int, nargs="+", default=[8])
    p.add_argument("--seconds", type=float, default=6.0)
    args = p.parse_args(argv)
    args.folder.mkdir(parents=True, exist_ok=True)
    onnx_path, rlx_path = _bake(args.folder)
    size = rlx_path.stat().st_size / onnx_path.stat().st_size
    print(f"exact .rlx {rlx_path.stat().st_size:,} B / ONNX {onnx_path.stat().st_size:,} B"
          f" = {size:.3f}")
    runners = _runners(onnx_path, rlx_path)
    for seq in args.seq:
        feeds = decoder_feeds(seq)
        with threadpool_limits(1):
            want = runners["ort"](feeds)
            diffs = {k: float(np.abs(run(feeds) - want).max()) for k, run in runners.items()}
            times: dict[str, list[float]] = {k: [] for k in runners}
            end = time.perf_counter() + args.seconds
            while time.perf_counter() < end:
                for key, run in runners.items():
                    clock = time.perf_counter if "openvino" in key else time.thread_time
                    for _ in range(3):
                        start = clock()
                        run(feeds)
                        times[key].append(clock() - start)
        base = statistics.median(times["ort"])
        for key, values in times.items():
            p50 = statistics.median(values)
            print(f"seq {seq:3d} {key:18s} {p50 * 1e3:8.2f} ms  x{p50 / base:5.2f}  "
                  f"max |diff| {diffs[key]:.3g}")


if __name__ == "__main__":
    main()
