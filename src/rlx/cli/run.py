"""`rlx-bake` commands that execute models: run, verify (against onnxruntime) and demo."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import threadpoolctl

from rlx.artifact import open_artifact
from rlx.artifact.atomic import atomic_write
from rlx.artifact.crypto import DEFAULT_KDF
from rlx.cli.export import add_engine_options, load_for_cli, uses_engine
from rlx.cli.sign import add_trusted_key_option, trusted_keys
from rlx.cli.ui import (
    CliError,
    Outcome,
    Ui,
    add_password_options,
    check_output,
    fmt_ms,
    fmt_shape,
    load_array,
    load_npz,
    non_negative_float,
    one_line,
    password_from,
    positive_int,
)
from rlx.demo import DEMO_KDF, DEMO_PASSWORD, run_demo
from rlx.ir import DType, Shape
from rlx.runtime.profile import OpProfile, profile_ops
from rlx.runtime.session import CompiledGraph, Session
from rlx.weights.writers import write_npz

__all__ = ["add_commands"]

_FORMATTER = argparse.RawDescriptionHelpFormatter


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    for add in (_add_run, _add_verify, _add_demo):
        add(sub, common)


# --- inputs and outputs as .npy / .npz ----------------------------------------------------


def _named_path(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH.npy, got {text!r}")
    return name, path


def _feeds(args) -> dict[str, np.ndarray]:
    if args.inputs:
        return load_npz(args.inputs)
    feeds: dict[str, np.ndarray] = {}
    for name, path in args.input or ():
        if name in feeds:
            raise CliError(f"input {name!r} is given twice")
        value = load_array(path)
        if not isinstance(value, np.ndarray):
            raise CliError(f"--input {name}={path}: expected one array (.npy), got an archive")
        feeds[name] = value
    return feeds


def _save_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    with atomic_write(path) as out:
        write_npz(out, arrays)


def _summary(name: str, value: np.ndarray) -> dict[str, Any]:
    """Name, shape, dtype and min/max/mean (NaNs are left out of these, and counted)."""
    dtype = DType.from_numpy(value.dtype)
    out: dict[str, Any] = {"name": name, "shape": list(value.shape), "dtype": dtype.value,
                           "min": None, "max": None, "mean": None, "nan": 0}
    values = value.astype(np.float64).ravel()
    if dtype.is_float:
        out["nan"] = int(np.isnan(values).sum())
        values = values[~np.isnan(values)]
    if values.size:
        out.update(min=float(values.min()), max=float(values.max()), mean=float(values.mean()))
    return out


def _load_compiled(path: str, password: str | bytes | None, ui: Ui,
                   args=None) -> tuple[CompiledGraph, dict]:
    """Read, then verify checksums, materialise and compile; the two phases timed apart.
    With --engine / --precision asking for another engine, `rlx.load` does it all."""
    if args is not None and uses_engine(args):
        if getattr(args, "profile_ops", False):
            raise CliError("--profile-ops times the numpy engine's nodes; "
                           "drop --engine/--precision")
        return load_for_cli(path, password, args, ui)  # type: ignore[return-value]
    with ui.step(f"loading {path}"):
        start = time.perf_counter()
        file = open_artifact(path, password=password,
                             trusted_keys=trusted_keys(args) if args is not None else None)
        if not len(file.graph):
            raise CliError(f"{path} holds weights only (a package written with --no-graph): "
                           "there is no graph to run")
        loaded = time.perf_counter()
        compiled = Session().compile(file.into_runtime_graph())
        done = time.perf_counter()
    return compiled, {"load_ms": (loaded - start) * 1e3, "compile_ms": (done - loaded) * 1e3}


# --- run ----------------------------------------------------------------------------------


def _add_run(sub, common) -> None:
    p = sub.add_parser("run", parents=[common], formatter_class=_FORMATTER,
                       help="run a .rlx file on inputs from .npy/.npz files",
                       description="Run a .rlx file on the CPU and summarise each output.",
                       epilog="examples:\n  rlx-bake run model.rlx --input x=x.npy\n"
                              "  rlx-bake run model.rlx --inputs feeds.npz --output out.npz "
                              "--repeat 20\n"
                              "  rlx-bake run model.rlx --inputs feeds.npz --profile-ops "
                              "--repeat 20 --top 15")
    p.add_argument("file", help="a .rlx file")
    given = p.add_mutually_exclusive_group()
    given.add_argument("--input", action="append", type=_named_path, metavar="NAME=PATH.npy",
                       help="one input (repeat the option for several)")
    given.add_argument("--inputs", metavar="FILE.npz", help="every input, by name, in one .npz")
    p.add_argument("--output", metavar="OUT.npz", help="save the outputs, by name, to an .npz")
    p.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                   help="run N times and report the median time (default 1)")
    p.add_argument("--threads", type=positive_int, metavar="N",
                   help="limit BLAS threads to N")
    profiling = p.add_argument_group("where the time goes")
    profiling.add_argument("--profile-ops", action="store_true",
                           help="time every node (median over --repeat runs, after one "
                                "warm-up) and print the time per op type and the slowest "
                                "nodes")
    profiling.add_argument("--top", type=positive_int, default=10, metavar="K",
                           help="how many of the slowest nodes to list (default 10)")
    add_password_options(p.add_argument_group("encrypted files"))
    add_engine_options(p)
    add_trusted_key_option(p)
    p.set_defaults(run=_run)


def _thread_limit(threads: int | None):
    """Limit BLAS threads in this process (BLAS reads its thread environment variables only
    when numpy loads, long before options are parsed, so threadpoolctl does it live)."""
    if threads is None:
        return contextlib.nullcontext()
    return threadpoolctl.threadpool_limits(limits=threads)


def _run(args, ui: Ui) -> Outcome:
    if args.output:
        check_output(args.output)
    password = password_from(args, ui)
    feeds = _feeds(args)
    compiled, timing = _load_compiled(args.file, password, ui, args)
    times = []
    with _thread_limit(args.threads):
        for _ in ui.track(range(args.repeat), "running"):
            start = time.perf_counter()
            outputs = compiled.run(feeds)
            times.append((time.perf_counter() - start) * 1e3)
        profile = profile_ops(compiled, feeds, args.repeat) if args.profile_ops else None
    named = dict(zip(compiled.output_names, outputs))
    if args.output:
        _save_npz(args.output, named)
    timing.update(run_ms_median=statistics.median(times), run_ms_min=min(times),
                  repeat=args.repeat)
    data = {"command": "run", "file": args.file,
            "inputs": [_summary(k, v) for k, v in feeds.items()],
            "outputs": [_summary(k, v) for k, v in named.items()],
            "timing": timing, "threads": args.threads, "saved_to": args.output,
            "profile": None if profile is None else _profile_data(profile, args.top)}
    return Outcome(data, _render_run)


def _profile_data(profile: OpProfile, top: int) -> dict[str, Any]:
    total = profile.total_seconds
    return {
        "runs": profile.runs, "total_ms": total * 1e3,
        "op_types": [{"op": r.op_type, "nodes": r.count, "ms": r.seconds * 1e3,
                      "share": r.share(total)} for r in profile.by_op_type()],
        "slowest": [{"node": n.label, "op": n.op, "ir_node": n.ir_label, "ms": n.seconds * 1e3,
                     "share": n.seconds / total if total else 0.0}
                    for n in profile.slowest(top)],
    }


def _stats_rows(summaries: list[dict]) -> list[tuple]:
    return [(s["name"], fmt_shape(s["shape"]), s["dtype"], _num(s["min"]), _num(s["max"]),
             _num(s["mean"]), s["nan"] or "") for s in summaries]


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def _render_run(d: dict, ui: Ui) -> None:
    ui.table(f"outputs of {d['file']}", ("name", "shape", "dtype", "min", "max", "mean", "NaN"),
             _stats_rows(d["outputs"]), numeric=("min", "max", "mean", "NaN"))
    t = d["timing"]
    ui.pairs("timing", [("load (read_rlx)", fmt_ms(t["load_ms"])),
                        ("compile (checksums, materialise, compile)", fmt_ms(t["compile_ms"])),
                        (f"run, median of {t['repeat']}", fmt_ms(t["run_ms_median"])),
                        ("run, fastest", fmt_ms(t["run_ms_min"]))])
    if d["profile"]:
        _render_profile(d["profile"], ui)
    if d["saved_to"]:
        ui.line(f"outputs saved to {d['saved_to']}")


def _render_profile(prof: dict, ui: Ui) -> None:
    runs = f"median of {prof['runs']} runs per node, {fmt_ms(prof['total_ms'])} in all"
    ui.table(f"time per op type ({runs})", ("op", "nodes", "time", "share"),
             [(r["op"], r["nodes"], fmt_ms(r["ms"]), f"{r['share']:.1%}")
              for r in prof["op_types"]], numeric=("nodes", "time", "share"))
    ui.table(f"slowest {len(prof['slowest'])} nodes", ("node", "op", "time", "share"),
             [(r["node"], r["op"], fmt_ms(r["ms"]), f"{r['share']:.1%}")
              for r in prof["slowest"]], numeric=("time", "share"))


# --- verify -------------------------------------------------------------------------------


def _add_verify(sub, common) -> None:
    p = sub.add_parser("verify", parents=[common], formatter_class=_FORMATTER,
                       help="compare a .rlx file's outputs with onnxruntime on the ONNX model",
                       description="Run the .rlx file and the ONNX model (with onnxruntime) on "
                                   "the same inputs and compare each output. An output passes "
                                   "when every element is within atol + rtol * |reference| or, "
                                   "with --min-cosine, when its cosine to the reference is at "
                                   "least C (give --rtol/--atol as well to require both). Exit "
                                   "0 when every output passes, 1 when a check fails, another "
                                   "code on an error. Without --inputs, inputs are random "
                                   "(seeded) from the declared shapes: symbolic dims are 1, "
                                   "floats standard normal, integers in 0..3, booleans fair "
                                   "coins.",
                       epilog="examples:\n  rlx-bake verify model.rlx --onnx model.onnx\n"
                              "  rlx-bake verify small.rlx --onnx model.onnx --rtol 0.05 "
                              "--atol 0.01\n"
                              "  rlx-bake verify small.rlx --onnx model.onnx --inputs x.npz "
                              "--min-cosine 0.999")
    p.add_argument("file", help="a .rlx file")
    p.add_argument("--onnx", required=True, metavar="MODEL.onnx", help="the reference model")
    p.add_argument("--inputs", metavar="FILE.npz", help="inputs by name (default: random)")
    p.add_argument("--rtol", type=non_negative_float, help="relative tolerance, >= 0 (1e-4)")
    p.add_argument("--atol", type=non_negative_float, help="absolute tolerance, >= 0 (1e-5)")
    p.add_argument("--min-cosine", type=non_negative_float, metavar="C",
                   help="pass an output on its cosine to the reference (>= C) instead")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (0)")
    add_password_options(p.add_argument_group("encrypted files"))
    add_engine_options(p)
    add_trusted_key_option(p)
    p.set_defaults(run=_verify)


def _random_feeds(shapes: Mapping[str, Shape], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape in shapes.items():
        dims = [d if isinstance(d, int) else 1 for d in shape.dims]
        if shape.dtype is DType.BOOL:
            feeds[name] = rng.random(dims) < 0.5
        elif shape.dtype.is_int:
            feeds[name] = rng.integers(0, 4, dims).astype(shape.dtype.numpy)
        else:
            feeds[name] = rng.standard_normal(dims).astype(shape.dtype.numpy)
    return feeds


def _onnxruntime():
    try:
        return importlib.import_module("onnxruntime")
    except ImportError:
        raise CliError("verify needs onnxruntime to run the reference model "
                       "(pip install onnxruntime)") from None


def _reference_outputs(ort, path: str, feeds: Mapping[str, np.ndarray]) -> tuple[list, list]:
    """(output names, outputs) of the ONNX model under onnxruntime (the module `ort`)."""
    if not Path(path).is_file():
        raise CliError(f"{path}: no such file")
    # onnxruntime reports a bad model or bad feeds with its own exception types (no common
    # base but Exception): they are the user's input, so they become one-line errors.
    try:
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise CliError(f"onnxruntime cannot load {path}: {one_line(err)}") from None
    expected = {i.name for i in session.get_inputs()}
    extra = sorted(set(feeds) - expected)
    if extra:
        raise CliError(f"input(s) {', '.join(extra)} are not inputs of {path} "
                       f"(its inputs: {', '.join(sorted(expected))})")
    try:
        outputs = session.run(None, dict(feeds))
    except Exception as err:
        raise CliError(f"onnxruntime failed on {path}: {one_line(err)}") from None
    return [o.name for o in session.get_outputs()], outputs


_RTOL, _ATOL = 1e-4, 1e-5
_MAX_CLASSES = 1000  # a last axis of 2..this many floats reads as class scores


def _compare(ours: np.ndarray, ref: np.ndarray, rtol: float, atol: float,
             min_cosine: float | None, elementwise: bool) -> dict[str, Any]:
    """Max abs error, max error relative to the largest |reference|, cosine, elements out of
    tolerance, argmax agreement of class-score rows, and the verdict."""
    empty = {"max_abs": None, "max_rel": None, "cosine": None, "mismatched": None,
             "mismatched_share": None, "argmax_agree": None}
    if ours.shape != ref.shape:
        return {**empty, "ok": False,
                "note": f"shape {list(ours.shape)} vs reference {list(ref.shape)}"}
    a, b = ours.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    close = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    mismatched = int(close.size - np.count_nonzero(close))
    if not a.size:
        return {**empty, "ok": True, "note": "empty", "max_abs": 0.0, "max_rel": 0.0,
                "mismatched": 0, "mismatched_share": 0.0}
    with np.errstate(invalid="ignore", divide="ignore"):
        max_abs = float(np.max(np.abs(a - b)))
        scale = float(np.max(np.abs(b)))
        norms = float(np.linalg.norm(a) * np.linalg.norm(b))
        cosine = float(a @ b / norms) if norms else None
    if norms == 0 and not np.any(a) and not np.any(b):
        cosine = 1.0  # both all zero: identical
    ok = mismatched == 0 if elementwise else True
    if min_cosine is not None:
        ok = ok and cosine is not None and cosine >= min_cosine
    note = "" if ours.dtype == ref.dtype else f"dtype {ours.dtype} vs reference {ref.dtype}"
    return {"ok": ok, "note": note, "max_abs": max_abs,
            "max_rel": max_abs / scale if scale else max_abs, "cosine": cosine,
            "mismatched": mismatched, "mismatched_share": mismatched / a.size,
            "argmax_agree": _argmax_agreement(ours, ref)}


def _argmax_agreement(ours: np.ndarray, ref: np.ndarray) -> float | None:
    """Share of rows (all axes but the last) whose largest entry is the same one, for
    float outputs that look like class scores (rank >= 2, 2..1000 on the last axis)."""
    if ref.ndim < 2 or not 2 <= ref.shape[-1] <= _MAX_CLASSES or ref.dtype.kind != "f":
        return None
    rows = ref.reshape(-1, ref.shape[-1])
    if not rows.shape[0]:
        return None
    same = np.argmax(ours.reshape(rows.shape), axis=-1) == np.argmax(rows, axis=-1)
    return float(np.mean(same))


def _verify(args, ui: Ui) -> Outcome:
    ort = _onnxruntime()  # first: fail before any work when it is missing
    password = password_from(args, ui)
    compiled, _ = _load_compiled(args.file, password, ui, args)
    feeds = load_npz(args.inputs) if args.inputs else _random_feeds(compiled.input_shapes,
                                                                args.seed)
    with ui.step("running both"):
        ours = compiled.run(feeds)
        ref_names, refs = _reference_outputs(ort, args.onnx, feeds)
    if len(refs) != len(ours):
        raise CliError(f"{args.file} has {len(ours)} output(s), {args.onnx} has {len(refs)}")
    # --min-cosine alone checks the cosine; with it, --rtol/--atol add the elementwise check
    elementwise = args.min_cosine is None or args.rtol is not None or args.atol is not None
    rtol = _RTOL if args.rtol is None else args.rtol
    atol = _ATOL if args.atol is None else args.atol
    rows = [{"name": name, "reference_name": ref_name, "shape": list(o.shape),
             **_compare(o, r, rtol, atol, args.min_cosine, elementwise)}
            for name, ref_name, o, r in zip(compiled.output_names, ref_names, ours, refs)]
    ok = all(r["ok"] for r in rows)
    data = {"command": "verify", "file": args.file, "onnx": args.onnx, "ok": ok,
            "rtol": rtol, "atol": atol, "min_cosine": args.min_cosine,
            "elementwise": elementwise,
            "inputs": args.inputs or f"random (seed {args.seed})",
            "feeds": [_summary(k, v) for k, v in feeds.items()], "outputs": rows}
    return Outcome(data, _render_verify, 0 if ok else 1)


def _render_verify(d: dict, ui: Ui) -> None:
    ui.table(f"{d['file']} vs onnxruntime on {d['onnx']} (inputs: {d['inputs']})",
             ("output", "shape", "max abs err", "max rel err", "cosine", "out of tol",
              "argmax agrees", "passes", "note"),
             [(r["name"], fmt_shape(r["shape"]), _num(r["max_abs"]), _num(r["max_rel"]),
               _num(r["cosine"]), _mismatch(r), _share(r["argmax_agree"]),
               "yes" if r["ok"] else "NO", r["note"])
              for r in d["outputs"]],
             numeric=("max abs err", "max rel err", "cosine", "out of tol", "argmax agrees"))
    verdict = "OK" if d["ok"] else "FAILED"
    checks = []
    if d["elementwise"]:
        checks.append(f"every element within atol {d['atol']:g} + rtol {d['rtol']:g} * "
                      "|reference|")
    if d["min_cosine"] is not None:
        checks.append(f"cosine >= {d['min_cosine']:g}")
    ui.line(f"{verdict}: {' and '.join(checks)} (max rel err is relative to the largest "
            "|reference| value; out of tol counts elements outside atol + rtol * |reference|)")


def _mismatch(r: dict) -> str:
    if r["mismatched"] is None:
        return ""
    return f"{r['mismatched']:,} ({_share(r['mismatched_share'])})"


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.2%}"


# --- demo ---------------------------------------------------------------------------------


def _add_demo(sub, common) -> None:
    p = sub.add_parser("demo", parents=[common], formatter_class=_FORMATTER,
                       help="train, bake and run a small MLP with every profile and memory mode",
                       description="Train a 64-256-10 MLP on the bundled 8x8 handwritten digits "
                                   "with numpy, ternarise its first layer, bake it with every "
                                   "profile and memory mode (and once encrypted), reload each "
                                   "file and score it on held-out digits.",
                       epilog="example:\n  rlx-bake demo --out /tmp/rlx-demo")
    p.add_argument("--out", default="demo-out", metavar="DIR",
                   help="where the .rlx files go (default ./demo-out)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and training (0)")
    p.set_defaults(run=_demo)


def _demo(args, ui: Ui) -> Outcome:
    with ui.step("demo") as update:
        result = run_demo(args.out, args.seed, progress=update)
    data = {"command": "demo", **dataclasses.asdict(result), "password": DEMO_PASSWORD,
            "kdf": dataclasses.asdict(DEMO_KDF), "default_kdf": dataclasses.asdict(DEFAULT_KDF)}
    return Outcome(data, _render_demo)


_DEMO_COLUMNS = ("profile", "memory", "encrypted", "file bytes", "f32 / file", "load",
                 "accuracy")


def _demo_row(r: dict) -> tuple:
    return (r["profile"], r["memory"], "yes" if r["encrypted"] else "", f"{r['file_bytes']:,}",
            f"{r['ratio']:.1f}x", fmt_ms(r["load_ms"]), f"{r['accuracy']:.1%}")


def _render_demo(d: dict, ui: Ui) -> None:
    ui.line(f"trained a 64-256-10 MLP on {d['train_size']} 8x8 digits, scored on "
            f"{d['test_size']} held-out ones")
    ui.line(f"accuracy before baking: float32 {d['float_accuracy']:.1%}; with w1 ternarised "
            f"and the rest fine-tuned {d['ternary_accuracy']:.1%}")
    ui.table("baked, written, reloaded and run", _DEMO_COLUMNS, map(_demo_row, d["rows"]),
             numeric=_DEMO_COLUMNS[3:])
    kdf, default = d["kdf"], d["default_kdf"]
    ui.line(f"raw float32 weights: {d['raw_f32_bytes']:,} bytes; load = read_rlx + "
            f"into_runtime_graph + compile; files in {d['out_dir']}/")
    ui.line(f"the encrypted file uses the password {d['password']!r} and a deliberately cheap "
            f"KDF (Argon2id {kdf['m_cost']:,} KiB, {kdf['t_cost']} pass) to stay fast; "
            f"rlx-bake bake --password-* uses {default['m_cost']:,} KiB and "
            f"{default['t_cost']} passes")
    ui.line(f"done in {d['seconds']:.1f} s")
