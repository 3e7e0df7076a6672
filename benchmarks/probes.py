"""Single measurements, each run alone in a fresh interpreter by `common.run_probe`:

    python -c "from benchmarks.probes import main; main()" NAME JSON-KEYWORD-ARGUMENTS

prints one JSON object. Heavy libraries (rlx, onnxruntime, onnx, gguf) are imported inside
the probe that needs them, so a process holds only what it measures and memory counters
compare like with like.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import proc_status, summarize_times, time_calls

MLP_SOURCE = "mlp"  # the demo MLP of rlx.models instead of an ONNX file

Runner = Callable[[dict[str, np.ndarray]], list]
PROBES: dict[str, Callable[..., dict]] = {}


def probe(fn: Callable[..., dict]) -> Callable[..., dict]:
    PROBES[fn.__name__] = fn
    return fn


def main() -> None:
    name, kwargs = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(PROBES[name](**kwargs)))


def load_source(source: str):
    """(graph, bindings) that rlx bakes: the demo MLP, or an imported ONNX file."""
    if source == MLP_SOURCE:
        from rlx.models import mlp_graph, mlp_weights

        return mlp_graph(), mlp_weights()
    from rlx.frontends import load_model
    from tests.real_models import import_kwargs

    return load_model(source, **import_kwargs(source))


def _elapsed(start: float) -> float:
    return time.perf_counter() - start


@probe
def import_model(source: str) -> dict:
    start = time.perf_counter()
    graph, bindings = load_source(source)
    return {"seconds": _elapsed(start), "nodes": len(graph), "bindings": len(bindings)}


def _unique_bytes(file) -> tuple[int, int]:
    """(weight bytes stored once - the table plus graph constants not in it, header bytes):
    what a compact file cannot go below."""
    from rlx.artifact.writer import encode_rlx

    _, header, _ = encode_rlx(file)
    in_table = {w.node_id for w in file.weights}
    constants = sum(n.op.nbytes for n in file.graph.nodes()
                    if type(n.op).__name__ == "Constant" and n.id not in in_table)
    return sum(w.nbytes for w in file.weights) + constants, len(header)


@probe
def bake(source: str, profile: str, memories: list[str], out_dir: str, min_calls: int,
         min_seconds: float) -> dict:
    """Bake one profile in each memory mode: the first (cold) bake, then repeated ones, then
    the write; files go to `out_dir/<profile>-<memory>.rlx`."""
    from rlx import BakeOptions, MemoryMode
    from rlx import bake as run_bake
    from rlx.artifact import write_artifact

    start = time.perf_counter()
    graph, bindings = load_source(source)
    out: dict[str, Any] = {"import_seconds": _elapsed(start), "nodes_before": len(graph),
                           "modes": {}}
    for memory in memories:
        opts = BakeOptions.from_profile(profile).replace(memory=MemoryMode(memory))
        start = time.perf_counter()
        file, _ = run_bake(graph, bindings, opts)
        first = _elapsed(start)
        times = time_calls(functools.partial(run_bake, graph, bindings, opts), min_calls,
                           min_seconds)
        path = Path(out_dir) / f"{profile}-{memory}.rlx"
        start = time.perf_counter()
        write_artifact(path, file)
        written = _elapsed(start)
        unique, header = _unique_bytes(file)
        out["modes"][memory] = {
            "first_seconds": first, "seconds": summarize_times(times)["p50"], "times": times,
            "write_seconds": written, "file_bytes": path.stat().st_size,
            "unique_weight_bytes": unique, "header_bytes": header, "path": str(path)}
        out["nodes_after"] = len(file.graph)
    return out


def _quantizer(codec: str, impl: str) -> Callable[[np.ndarray], np.ndarray]:
    if impl == "rlx":
        from rlx import codecs

        return getattr(codecs, f"quantize_{codec}")
    import gguf

    qtype = gguf.GGMLQuantizationType[codec.upper()]
    return lambda values: gguf.quants.quantize(values, qtype)


@probe
def quantize(array: str, codec: str, impl: str, min_calls: int, min_seconds: float) -> dict:
    """Throughput of one quantiser (`rlx` or `gguf`) on the rows in `array` (.npy); the
    sha256 of its bytes lets the caller check both produce the same stream."""
    values = np.load(array)
    quantize_fn = _quantizer(codec, impl)
    encoded = quantize_fn(values)  # warm-up, and the bytes to compare
    times = time_calls(lambda: quantize_fn(values), min_calls, min_seconds)
    seconds = summarize_times(times)["p50"]
    return {"values": int(values.size), "seconds": seconds, "times": times,
            "values_per_second": values.size / seconds,
            "sha256": hashlib.sha256(np.ascontiguousarray(encoded).tobytes()).hexdigest()}


def _runtime(runtime: str) -> Callable[[str, int | None], Runner]:
    """Import `runtime` (outside any timing) and return how it gets ready to run a file:
    everything a user does before the first call. The thread count applies to onnxruntime
    (intra-op, with inter-op 1); BLAS threads are limited around the call."""
    if runtime == "rlx":
        from rlx.artifact import read_rlx
        from rlx.runtime import Session

        return lambda path, _: Session().compile(read_rlx(path).into_runtime_graph()).run
    if runtime == "onnxruntime":
        import onnxruntime as ort

        def ready(path: str, threads: int | None) -> Runner:
            options = ort.SessionOptions()
            if threads is not None:
                options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            return lambda feeds: session.run(None, feeds)

        return ready
    if runtime == "onnx.reference":
        from onnx.reference import ReferenceEvaluator

        def evaluator(path: str, _: int | None) -> Runner:
            reference = ReferenceEvaluator(path)
            return lambda feeds: reference.run(None, feeds)

        return evaluator
    raise ValueError(f"unknown runtime {runtime!r}")


def _feeds(path: str) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


@probe
def load(runtime: str, path: str, feeds: str | None = None) -> dict:
    """Time and memory from "libraries imported" to "ready to run" (rlx: read_rlx +
    into_runtime_graph + compile; onnxruntime: InferenceSession), then, given feeds, to the
    end of the first run. `second`: the counters after the same file is made ready again,
    in the same process: what one more model costs, with no import effect."""
    inputs = _feeds(feeds) if feeds else None
    ready_fn = _runtime(runtime)
    before = proc_status()
    start = time.perf_counter()
    run = ready_fn(path, None)
    ready = _elapsed(start)
    after = proc_status()
    again = ready_fn(path, None)
    out = {"seconds": ready, "before": before, "after": after, "second": proc_status()}
    del again
    if inputs is not None:
        run(inputs)
        out["first_result_seconds"] = _elapsed(start)
        out["after_run"] = proc_status()
    return out


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[bool]:
    """Limit BLAS / OpenMP pools to `n` threads; yields False when threadpoolctl is missing
    (the numbers are then recorded as unlimited rather than silently mislabelled)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield False
        return
    with threadpool_limits(limits=n):
        yield True


@probe
def latency(runtime: str, path: str, feeds: str, threads: int, warmup: int, min_calls: int,
            min_seconds: float, too_slow: float | None, out: str) -> dict:
    """Per-call latency after warm-up; the first call's outputs are saved to `out` (.npz) so
    the caller can check the runtimes agree. A first call over `too_slow` seconds ends the
    probe with {"skipped": "too slow"}."""
    inputs = _feeds(feeds)
    with blas_threads(threads) as limited:
        run = _runtime(runtime)(path, threads)
        start = time.perf_counter()
        outputs = run(inputs)
        first = _elapsed(start)
        if too_slow is not None and first > too_slow:
            return {"skipped": "too slow", "first_call_seconds": first}
        for _ in range(warmup - 1):
            run(inputs)
        times = time_calls(lambda: run(inputs), min_calls, min_seconds)
    np.savez(out, *(np.asarray(o) for o in outputs))
    return {**summarize_times(times), "times": times, "first_call_seconds": first,
            "threads": threads, "blas_limited": limited}


@probe
def profile(path: str, feeds: str, threads: int, repeat: int, top: int) -> dict:
    """Where rlx's time goes on one artifact (`rlx.runtime.profile`): the `top` op types by
    median time per run, with their node counts."""
    from rlx.artifact import read_rlx
    from rlx.runtime import Session
    from rlx.runtime.profile import profile_ops

    inputs = _feeds(feeds)
    with blas_threads(threads) as limited:
        compiled = Session().compile(read_rlx(path).into_runtime_graph())
        result = profile_ops(compiled, inputs, repeat)
    total = result.total_seconds
    return {"threads": threads, "blas_limited": limited, "runs": repeat,
            "total_seconds": total, "nodes": len(result.nodes),
            "op_types": [{"op": r.op_type, "nodes": r.count, "seconds": r.seconds,
                          "share": r.share(total)} for r in result.by_op_type()[:top]]}
