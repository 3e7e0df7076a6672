"""Streaming cost (issue 36): CPU time per chunk of silero-vad (baked, exact profile) fed its
state back, 1 thread, min over repeats, in one run of under a minute.

    .venv/bin/python benchmarks/bench_stream.py [--chunks 400] [--repeat 5]

Per engine: the hand-written loop on the rlx `Model`, then `Model.stream()`; for onnxruntime
also the hand loop on onnxruntime's own session over the original .onnx file. Then
OpenVINO's stateful model (MakeStateful: the state kept inside the infer request) against the
same model fed its state as arrays, both reshaped to a static state (a dynamic one starts the
variable empty), and whether the two agree bit for bit.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rlx  # noqa: E402
from rlx import BakeOptions, bake, write_rlx  # noqa: E402
from rlx.onnx import import_onnx  # noqa: E402
from tests.real_models import fetch, import_kwargs  # noqa: E402

SR = np.array(16000, np.int64)
STATE = (2, 1, 128)


def cpu_us(loops: dict[str, Callable[[], object]], chunks: int, repeat: int
           ) -> dict[str, float]:
    """Fastest CPU time per chunk of each loop (each runs `chunks`) over `repeat` rounds in
    which every loop runs once, in turn: a burst of other work slows them alike."""
    best = dict.fromkeys(loops, float("inf"))
    for _ in range(repeat):
        for label, loop in loops.items():
            start = time.process_time()
            loop()
            best[label] = min(best[label], time.process_time() - start)
    return {label: seconds / chunks * 1e6 for label, seconds in best.items()}


def show(engine: str, times: dict[str, float]) -> None:
    for label, us in times.items():
        print(f"{engine:12s} {label:30s} {us:7.1f} us/chunk")


def hand_loop(run: Callable[[dict], list], xs: np.ndarray) -> list:
    state, outputs = np.zeros(STATE, np.float32), []
    for x in xs:
        out, state = run({"input": x, "state": state, "sr": SR})
        outputs.append(out)
    return outputs


def engines(path: Path, xs: np.ndarray, repeat: int) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(fetch("silero-vad")), options,
                                   providers=["CPUExecutionProvider"])
    for engine in ("numpy", "onnxruntime", "openvino"):
        model = rlx.load(path, engine=engine, threads=1)

        def streamed(model=model):
            stream = model.stream()
            return [stream.run({"input": x, "sr": SR}) for x in xs]

        loops = {"hand loop on the Model": lambda model=model: hand_loop(model.run, xs),
                 "Model.stream()": streamed}
        if engine == "onnxruntime":
            loops["hand loop, onnxruntime's own"] = lambda: hand_loop(
                lambda feeds: session.run(None, feeds), xs)
        show(engine, cpu_us(loops, len(xs), repeat))


def openvino_stateful(path: Path, xs: np.ndarray, repeat: int) -> None:
    from openvino._offline_transformations import apply_make_stateful_transformation

    from rlx.engines.openvino_engine import core

    runner = rlx.load(path, engine="openvino", threads=1).runner
    config = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": "1",
              "INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
    plain_model, stateful_model = runner.model.clone(), runner.model.clone()
    for model in (plain_model, stateful_model):
        model.reshape({"state": list(STATE)})
    apply_make_stateful_transformation(stateful_model, {"state": "stateN"})
    plain = core().compile_model(plain_model, "CPU", config).create_infer_request()
    stateful = core().compile_model(stateful_model, "CPU", config).create_infer_request()

    def fed() -> list:
        return hand_loop(lambda feeds: [np.array(v) for v in plain.infer(feeds).values()], xs)

    def kept() -> list:
        stateful.reset_state()
        return [np.array(next(iter(stateful.infer({"input": x, "sr": SR}).values())))
                for x in xs]

    print(f"openvino stateful == state as arrays, bit for bit: "
          f"{np.array_equal(np.array(fed()), np.array(kept()))}")
    show("openvino", cpu_us({"state as arrays (static)": fed, "stateful model (static)": kept},
                            len(xs), repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    source = fetch("silero-vad")
    graph, bindings = import_onnx(source, **import_kwargs(source))
    file, _ = bake(graph, bindings, BakeOptions.from_profile("exact"))
    xs = (np.random.default_rng(0).standard_normal((args.chunks, 1, 576)) * 0.3
          ).astype(np.float32)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "silero-vad.rlx"
        write_rlx(path, file)
        engines(path, xs, args.repeat)
        openvino_stateful(path, xs, args.repeat)


if __name__ == "__main__":
    main()
