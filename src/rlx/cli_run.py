"""`rlx-bake` commands that execute models: run, verify (against onnxruntime) and demo."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import statistics
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import threadpoolctl

from rlx.artifact import read_rlx
from rlx.artifact.atomic import atomic_write
from rlx.artifact.crypto import DEFAULT_KDF
from rlx.cli_ui import (
    CliError,
    Outcome,
    Ui,
    add_password_options,
    check_output,
    fmt_ms,
    fmt_shape,
    one_line,
    password_from,
    positive_int,
)
from rlx.demo import DEMO_KDF, DEMO_PASSWORD, run_demo
from rlx.ir import DType, Shape
from rlx.runtime import CompiledGraph, Session
from rlx.runtime.profile import OpProfile, profile_ops

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


_NUMPY_MAGICS = (b"\x93NUMPY", b"PK\x03\x04")  # .npy, and the zip archive of an .npz


def _load_array(path: str) -> Any:
    """np.load without pickles; a file numpy cannot read is a user error naming it. (For
    any other file np.load would talk about pickles, hence the magic check first.)"""
    with open(path, "rb") as f:
        if not f.read(6).startswith(_NUMPY_MAGICS):
            raise CliError(f"{path} is not a .npy or .npz file")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, EOFError, zipfile.BadZipFile) as err:
        raise CliError(f"cannot read {path} as .npy/.npz: {one_line(err)}") from None


def _feeds(args) -> dict[str, np.ndarray]:
    if args.inputs:
        return _npz(args.inputs)
    feeds: dict[str, np.ndarray] = {}
    for name, path in args.input or ():
        if name in feeds:
            raise CliError(f"input {name!r} is given twice")
        value = _load_array(path)
        if not isinstance(value, np.ndarray):
            raise CliError(f"--input {name}={path}: expected one array (.npy), got an archive")
        feeds[name] = value
    return feeds


def _npz(path: str) -> dict[str, np.ndarray]:
    archive = _load_array(path)
    if isinstance(archive, np.ndarray):
        raise CliError(f"{path} holds one array; --inputs expects an .npz archive of them")
    with archive:
        try:  # members are read here, lazily: a pickled one fails only now
            return {name: archive[name] for name in archive.files}
        except ValueError as err:
            raise CliError(f"cannot read {path}: {one_line(err)}") from None


def _save_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """An .npz written atomically. np.savez would take the names as keyword arguments, so an
    output named `file` would clash with its own parameter; this writes the same format."""
    with atomic_write(path) as out, zipfile.ZipFile(out, "w") as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)


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


def _load_compiled(path: str, password: str | None, ui: Ui) -> tuple[CompiledGraph, dict]:
    """Read, then verify checksums, materialise and compile; the two phases timed apart."""
    with ui.step(f"loading {path}"):
        start = time.perf_counter()
        file = read_rlx(path, password=password)
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
    compiled, timing = _load_compiled(args.file, password, ui)
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
        "slowest": [{"node": n.label, "op": n.op, "ms": n.seconds * 1e3,
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
                                   "the same inputs and compare each output; exit 0 only when "
                                   "every element is within atol + rtol * |reference|. Without "
                                   "--inputs, inputs are random (seeded) from the declared "
                                   "shapes: symbolic dims are 1, floats standard normal, "
                                   "integers in 0..3, booleans fair coins.",
                       epilog="examples:\n  rlx-bake verify model.rlx --onnx model.onnx\n"
                              "  rlx-bake verify small.rlx --onnx model.onnx --rtol 0.05 "
                              "--atol 0.01")
    p.add_argument("file", help="a .rlx file")
    p.add_argument("--onnx", required=True, metavar="MODEL.onnx", help="the reference model")
    p.add_argument("--inputs", metavar="FILE.npz", help="inputs by name (default: random)")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (1e-4)")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (1e-5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (0)")
    add_password_options(p.add_argument_group("encrypted files"))
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


def _compare(ours: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> dict[str, Any]:
    """Max abs error, max error relative to the largest |reference|, cosine, verdict."""
    if ours.shape != ref.shape:
        return {"ok": False, "note": f"shape {list(ours.shape)} vs reference {list(ref.shape)}",
                "max_abs": None, "max_rel": None, "cosine": None}
    a, b = ours.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    ok = bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    if not a.size:
        return {"ok": ok, "note": "empty", "max_abs": 0.0, "max_rel": 0.0, "cosine": None}
    with np.errstate(invalid="ignore", divide="ignore"):
        max_abs = float(np.max(np.abs(a - b)))
        scale = float(np.max(np.abs(b)))
        norms = float(np.linalg.norm(a) * np.linalg.norm(b))
        cosine = float(a @ b / norms) if norms else None
    note = "" if ours.dtype == ref.dtype else f"dtype {ours.dtype} vs reference {ref.dtype}"
    return {"ok": ok, "note": note, "max_abs": max_abs,
            "max_rel": max_abs / scale if scale else max_abs, "cosine": cosine}


def _verify(args, ui: Ui) -> Outcome:
    ort = _onnxruntime()  # first: fail before any work when it is missing
    password = password_from(args, ui)
    compiled, _ = _load_compiled(args.file, password, ui)
    feeds = _npz(args.inputs) if args.inputs else _random_feeds(compiled.input_shapes,
                                                                args.seed)
    with ui.step("running both"):
        ours = compiled.run(feeds)
        ref_names, refs = _reference_outputs(ort, args.onnx, feeds)
    if len(refs) != len(ours):
        raise CliError(f"{args.file} has {len(ours)} output(s), {args.onnx} has {len(refs)}")
    rows = [{"name": name, "reference_name": ref_name, "shape": list(o.shape),
             **_compare(o, r, args.rtol, args.atol)}
            for name, ref_name, o, r in zip(compiled.output_names, ref_names, ours, refs)]
    ok = all(r["ok"] for r in rows)
    data = {"command": "verify", "file": args.file, "onnx": args.onnx, "ok": ok,
            "rtol": args.rtol, "atol": args.atol,
            "inputs": args.inputs or f"random (seed {args.seed})",
            "feeds": [_summary(k, v) for k, v in feeds.items()], "outputs": rows}
    return Outcome(data, _render_verify, 0 if ok else 1)


def _render_verify(d: dict, ui: Ui) -> None:
    ui.table(f"{d['file']} vs onnxruntime on {d['onnx']} (inputs: {d['inputs']})",
             ("output", "shape", "max abs err", "max rel err", "cosine", "within tol", "note"),
             [(r["name"], fmt_shape(r["shape"]), _num(r["max_abs"]), _num(r["max_rel"]),
               _num(r["cosine"]), "yes" if r["ok"] else "NO", r["note"])
              for r in d["outputs"]], numeric=("max abs err", "max rel err", "cosine"))
    verdict = "OK" if d["ok"] else "FAILED"
    ui.line(f"{verdict}: tolerance atol {d['atol']:g} + rtol {d['rtol']:g} * |reference| "
            "(max rel err is relative to the largest |reference| value)")


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
