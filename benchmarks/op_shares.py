"""Per-op-type share of the run: rlx (`profile_ops` on the baked exact artifact) against
onnxruntime (its own profiler, `SessionOptions.enable_profiling`), both at one thread, so
an rlx kernel that is slow relative to the rest of the model shows as a share far above
onnxruntime's share for the same ONNX op type.

`python -m benchmarks.op_shares [MODEL ...] [--repeat N] [--threads N]` prints one
markdown table per model: op type, rlx ms and share, onnxruntime ms and share, and the
ratio of shares (rlx op types are mapped to the ONNX op types they come from). A fused
rlx op shares one row with the ONNX op types it replaces (`Silu + Sigmoid + Mul`): the
row compares what both runtimes spend on that work, and the other uses of those types
(a Mul elsewhere) come along on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

__all__ = ["main", "ort_shares", "rlx_shares"]

_RLX_TO_ONNX = {
    "Binary(add)": "Add", "Binary(sub)": "Sub", "Binary(mul)": "Mul", "Binary(div)": "Div",
    "Binary(pow)": "Pow", "Binary(max)": "Max", "Binary(min)": "Min",
    "Unary(relu)": "Relu", "Unary(sigmoid)": "Sigmoid", "Unary(tanh)": "Tanh",
    "Unary(erf)": "Erf", "Unary(hard_sigmoid)": "HardSigmoid", "Unary(hard_swish)": "HardSwish",
    "Unary(sqrt)": "Sqrt", "Unary(exp)": "Exp", "Clamp": "Clip", "Reduce(mean)": "ReduceMean",
    "GlobalPool(avg)": "GlobalAveragePool", "LayerNorm": "LayerNormalization",
    "Softmax": "Softmax", "Conv": "Conv", "MatMul": "MatMul+Gemm", "Gemm": "MatMul+Gemm",
    "Transpose": "Transpose", "Reshape": "Reshape", "Concat": "Concat", "Split": "Split",
    "Slice": "Slice", "LSTM": "LSTM", "Resize": "Resize", "Pool(max)": "MaxPool",
    "Pool(avg)": "AveragePool", "Gather": "Gather", "Where": "Where", "Cast": "Cast",
    "BatchNorm": "BatchNormalization", "Pad": "Pad",
}


_FUSED = {
    "Silu": ("Sigmoid", "Mul"),
    "HardSwish": ("HardSigmoid", "Mul", "Add", "Clip", "Div"),
    "Gelu": ("Erf", "Div", "Mul", "Add", "Pow", "Tanh"),
    "Mish": ("Softplus", "Tanh", "Mul", "Exp", "Log", "Add"),
}
"""rlx's fused op types and the ONNX op types an exporter writes them with."""


def _rows(types: set[str]) -> dict[str, str]:
    """Each op type -> its row's name: fused types and the types they replace, joined
    (transitively: Silu and Gelu share Mul), the rest alone."""
    row = {t: t for t in types}

    def find(t: str) -> str:
        while row[t] != t:
            t = row[t]
        return t

    for fused, parts in _FUSED.items():
        if fused in row:
            for part in parts:
                if part in row:
                    row[find(part)] = find(fused)
    members: dict[str, list[str]] = defaultdict(list)
    for t in sorted(types):
        members[find(t)].append(t)
    return {t: " + ".join(sorted(members[find(t)], key=lambda m: (m not in _FUSED, m)))
            for t in types}


def _onnx_type(rlx_type: str) -> str:
    if rlx_type in ("MatMul", "Gemm"):
        return "MatMul+Gemm"
    if rlx_type in _RLX_TO_ONNX:
        return _RLX_TO_ONNX[rlx_type]
    return rlx_type


def rlx_shares(onnx_path: Path, feeds: dict, repeat: int) -> dict[str, float]:
    """Seconds per rlx op type (median per node, summed), exact profile."""
    from rlx import bake_file, load
    from rlx.runtime.profile import profile_ops
    from tests.real_models import import_kwargs

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.rlx"
        bake_file(onnx_path, path, profile="exact", **import_kwargs(onnx_path))
        model = load(path, engine="numpy")
        prof = profile_ops(model.runner.compiled, feeds, repeat)
    out: dict[str, float] = defaultdict(float)
    for row in prof.by_op_type():
        out[row.op_type] += row.seconds
    return dict(out)


def ort_shares(onnx_path: Path, feeds: dict, repeat: int, threads: int) -> dict[str, float]:
    """Seconds per ONNX op type from onnxruntime's profiler (mean over `repeat` runs)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        # basic level: constant folding and no fusions, so times stay on the ONNX op types
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        for _ in range(repeat + 1):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")[1:]
    per_run: dict[str, float] = defaultdict(float)
    for e in events:  # node times of every run but the first (the warm-up)
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") \
                and any(lo <= e["ts"] <= hi for lo, hi in runs):
            per_run[e["args"]["op_name"]] += e["dur"] * 1e-6 / len(runs)
    return dict(per_run)


def table(name: str, rlx: dict[str, float], ort_raw: dict[str, float]) -> tuple[str, list[str]]:
    """Markdown rows and the ONNX op types whose rlx share is > 3x onnxruntime's."""
    total_r, total_o = sum(rlx.values()), sum(ort_raw.values())
    rows = _rows({_onnx_type(t) for t in (*rlx, *ort_raw)})
    merged: dict[str, list] = defaultdict(lambda: [0.0, []])
    ort_: dict[str, float] = defaultdict(float)
    for t, sec in ort_raw.items():
        ort_[rows[_onnx_type(t)]] += sec
    for t, sec in rlx.items():
        merged[rows[_onnx_type(t)]][0] += sec
        merged[rows[_onnx_type(t)]][1].append(t)
    types = sorted(set(merged) | set(ort_), key=lambda t: -merged.get(t, [0.0])[0])
    lines = [(f"### {name}: rlx {total_r * 1e3:.2f} ms, onnxruntime {total_o * 1e3:.2f} ms "
              "(sum of op times)"), "",
             "| op type | rlx types | rlx ms | rlx share | ORT ms | ORT share | share ratio |",
             "|---|---|---|---|---|---|---|"]
    flagged = []
    for t in types:
        r = merged[t][0] if t in merged else 0.0
        o = ort_.get(t, 0.0)
        rs, os_ = r / total_r, o / total_o
        if rs < 0.01 and os_ < 0.01:
            continue
        ratio = rs / os_ if os_ else float("inf")
        if ratio > 3 and rs >= 0.02:
            flagged.append(t)
        lines.append(f"| {t} | {', '.join(merged[t][1]) if t in merged else ''} | {r * 1e3:.3f}"
                     f" | {rs:.1%} | {o * 1e3:.3f} | {os_:.1%} | {ratio:.2f} |")
    return "\n".join(lines), flagged


def main(argv: list[str] | None = None) -> None:
    from threadpoolctl import threadpool_limits

    from tests.real_models import FEEDS, MODELS, fetch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=list(MODELS))
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    summary = []
    for name in args.models:
        path, feeds = fetch(name), FEEDS[name](0)
        with threadpool_limits(args.threads):
            r = rlx_shares(path, feeds, args.repeat)
        o = ort_shares(path, feeds, args.repeat, args.threads)
        text, flagged = table(name, r, o)
        print(text, "\n", flush=True)
        summary.append((name, flagged))
    print("op types with an rlx share > 3x onnxruntime's (and >= 2% of rlx's run):")
    for name, flagged in summary:
        print(f"- {name}: {', '.join(flagged) or 'none'}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
