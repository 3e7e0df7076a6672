"""`rlx-bake verify`: a `.rlx` file's outputs (through `rlx.load`, on any engine) against
onnxruntime's on the ONNX model, output by output: max errors, cosine, elements out of
tolerance, argmax agreement and, for per-step class scores (a CTC head's), the greedy
decoded sequences' agreement; and how the file was baked, so that a lossy file failing
the default (exact) tolerance is told so, with the `--min-cosine` it meets."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlx.artifact import open_artifact
from rlx.cli.ctc import decoded_agreement
from rlx.cli.formatting import fmt_shape, one_line
from rlx.cli.inputs import load_npz, non_negative_float, non_negative_int
from rlx.cli.run import add_engine_options, load_for_run, num, summary
from rlx.cli.self_test import verify_bundled
from rlx.cli.sign import add_trusted_key_option, trusted_keys
from rlx.cli.ui import CliError, Outcome, Ui, add_password_options, password_from
from rlx.errors import RlxError
from rlx.ir import DType, Shape
from rlx.onnx import onnx_op_types, read_model
from rlx.onnx.step_scores import step_scores

__all__ = ["add_commands"]

_FORMATTER = argparse.RawDescriptionHelpFormatter


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("verify", parents=[common], formatter_class=_FORMATTER,
                       help="compare a .rlx file's outputs with onnxruntime on the ONNX model "
                            "(or run its bundled self-test)",
                       description="Run the .rlx file and the ONNX model (with onnxruntime) on "
                                   "the same inputs and compare each output. An output passes "
                                   "when every element is within atol + rtol * |reference| or, "
                                   "with --min-cosine, when its cosine to the reference is at "
                                   "least C (give --rtol/--atol as well to require both). Exit "
                                   "0 when every output passes, 1 when a check fails, another "
                                   "code on an error. Without --inputs, inputs are random "
                                   "(seeded) from the declared shapes: symbolic dims are 1, "
                                   "floats standard normal, integers in 0..3, booleans fair "
                                   "coins. Without --onnx, the file's bundled self-test "
                                   "(bake --self-test) runs instead: its stored inputs, "
                                   "reference outputs and tolerances.",
                       epilog="examples:\n  rlx-bake verify model.rlx --onnx model.onnx\n"
                              "  rlx-bake verify small.rlx --onnx model.onnx --rtol 0.05 "
                              "--atol 0.01\n"
                              "  rlx-bake verify small.rlx --onnx model.onnx --inputs x.npz "
                              "--min-cosine 0.999\n"
                              "  rlx-bake verify model.rlx --engine all")
    p.add_argument("file", help="a .rlx file")
    p.add_argument("--onnx", metavar="MODEL.onnx",
                   help="the reference model (default: the file's bundled self-test, on "
                        "--engine, or on every installed engine with --engine all)")
    p.add_argument("--inputs", metavar="FILE.npz", help="inputs by name (default: random)")
    p.add_argument("--rtol", type=non_negative_float, help="relative tolerance, >= 0 (1e-4)")
    p.add_argument("--atol", type=non_negative_float, help="absolute tolerance, >= 0 (1e-5)")
    p.add_argument("--min-cosine", type=non_negative_float, metavar="C",
                   help="pass an output on its cosine to the reference (>= C) instead")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (0)")
    p.add_argument("--ctc-blank", type=non_negative_int, default=0, metavar="N",
                   help="the blank class of CTC-like outputs (per-step class scores), whose "
                        "greedy decodings are compared (0, the common convention)")
    add_password_options(p.add_argument_group("encrypted files"))
    add_engine_options(p, also=("all",))
    add_trusted_key_option(p)
    # no --precision: the file's own (fast for a file baked with the fast profile: its plan)
    p.set_defaults(run=_verify, precision=None)


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
    options = ort.SessionOptions()
    options.log_severity_level = 3  # its warnings (colour codes and all) are not the user's
    try:
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
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
# encodings that round an f32 weight when the bake stores it so (TQ2_0 packs only exact
# ternaries, q8_f32 only weights already on an int8 grid)
_ROUNDING = ("f16", "bf16", "gguf_q8_0")


def _how_baked(model, path: str, password, onnx_model) -> dict[str, Any]:
    """The file's profile, its weights stored with rounding (by encoding) and the ONNX
    model's quantising ops (by op type): why the two can differ beyond float error."""
    try:
        file = model.file
    except RlxError:  # an encrypted file is opened with its password
        file = open_artifact(path, password)
    rounded: dict[str, int] = {}
    for w in file.weights:
        if w.dtype == "f32" and w.encoding in _ROUNDING:
            rounded[w.encoding] = rounded.get(w.encoding, 0) + 1
    ops = onnx_op_types(onnx_model)
    quantizing = {op: n for op, n in sorted(ops.items()) if _quantizes(op)}
    return {"profile": file.meta.profile or None, "rounded_weights": rounded,
            "source_quantized_ops": quantizing}


def _quantizes(op: str) -> bool:
    """ONNX (and contrib) ops that compute on quantised values: their rounding is the
    runtime's own (QuantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearConv,
    MatMulNBits ...)."""
    name = op.rpartition(".")[2]
    return "Quantize" in name or "Integer" in name or name.startswith("QLinear") \
        or name.endswith("NBits")


def _advice(rows: list[dict], baked: dict[str, Any], elementwise: bool) -> str | None:
    """When the elementwise check failed on a file meant to differ (rounded weights, or a
    quantising source model): why, the worst cosine measured, and the --min-cosine that
    checks the file as intended (the cosine rounded down one digit past its nines)."""
    why = [f"{n} weight(s) stored as {e}" for e, n in baked["rounded_weights"].items()]
    why += [f"{op} x{n}" for op, n in baked["source_quantized_ops"].items()]
    cosines = [r["cosine"] for r in rows if r["cosine"] is not None]
    if not elementwise or all(r["ok"] for r in rows) or not why or not cosines:
        return None
    worst = min(cosines)
    digits = max(int(-np.floor(np.log10(max(1 - worst, 1e-12)))), 2)
    kind = "lossy by design" if baked["rounded_weights"] else "quantised at run time"
    text = (f"the outputs are {kind} ({', '.join(why)}; profile "
            f"{baked['profile'] or '?'}), so the default tolerance (float error only) does "
            f"not apply; worst output cosine {worst:.{digits + 2}f}")
    if worst < 0.99:
        return text + ": more than rounding apart"
    least = np.floor(worst * 10**digits) / 10**digits
    return text + f": check it with --min-cosine {least:.{digits}f}"


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
    float outputs that can be class scores (rank >= 2, 2 or more on the last axis: an OCR
    head has thousands)."""
    if ref.ndim < 2 or ref.shape[-1] < 2 or ref.dtype.kind != "f":
        return None
    rows = ref.reshape(-1, ref.shape[-1])
    if not rows.shape[0]:
        return None
    same = np.argmax(ours.reshape(rows.shape), axis=-1) == np.argmax(rows, axis=-1)
    return float(np.mean(same))


def _verify(args, ui: Ui) -> Outcome:
    password = password_from(args, ui)
    plan = open_artifact(args.file, password, trusted_keys=trusted_keys(args)).precision_plan
    if args.precision is None:  # the file's own: a fast file's plan
        args.precision = "fast" if plan is not None else "exact"
    if args.onnx is None:
        given = [o for o, v in (("--inputs", args.inputs), ("--rtol", args.rtol),
                                ("--atol", args.atol), ("--min-cosine", args.min_cosine))
                 if v is not None]
        if given:
            raise CliError(f"{', '.join(given)} apply with --onnx; the bundled self-test "
                           "uses its stored inputs and tolerances")
        with ui.step("running the bundled self-test"):
            return verify_bundled(args, password, trusted_keys(args))
    if args.engine == "all":
        raise CliError("--engine all runs the bundled self-test; with --onnx name one engine")
    ort = _onnxruntime()  # before any run: fail early when it is missing
    model, _ = load_for_run(args.file, password, args, ui)
    shapes = {i.name: Shape(i.shape, DType.from_numpy(i.dtype)) for i in model.inputs}
    feeds = load_npz(args.inputs) if args.inputs else _random_feeds(shapes, args.seed)
    with ui.step("running both"):
        ours = model.run(feeds)
        ref_names, refs = _reference_outputs(ort, args.onnx, feeds)
    if len(refs) != len(ours):
        raise CliError(f"{args.file} has {len(ours)} output(s), {args.onnx} has {len(refs)}")
    # --min-cosine alone checks the cosine; with it, --rtol/--atol add the elementwise check
    elementwise = args.min_cosine is None or args.rtol is not None or args.atol is not None
    rtol = _RTOL if args.rtol is None else args.rtol
    atol = _ATOL if args.atol is None else args.atol
    onnx_model = read_model(args.onnx)
    scores = step_scores(onnx_model)
    rows = [{"name": name, "reference_name": ref_name, "shape": list(o.shape),
             **_compare(o, r, rtol, atol, args.min_cosine, elementwise),
             "ctc": decoded_agreement(name, o, r, scores[ref_name], feeds, args.ctc_blank)
             if ref_name in scores else None}
            for name, ref_name, o, r in zip([spec.name for spec in model.outputs],
                                            ref_names, ours, refs)]
    ok = all(r["ok"] for r in rows)
    baked = _how_baked(model, args.file, password, onnx_model)
    data = {"command": "verify", "file": args.file, "onnx": args.onnx, "ok": ok,
            "baked": baked, "advice": _advice(rows, baked, elementwise),
            "rtol": rtol, "atol": atol, "min_cosine": args.min_cosine,
            "elementwise": elementwise,
            "inputs": args.inputs or f"random (seed {args.seed})",
            "engine": model.engine, "precision": model.precision,
            "plan": plan.summary if plan is not None else None,
            "feeds": [summary(k, v) for k, v in feeds.items()], "outputs": rows}
    return Outcome(data, _render_verify, 0 if ok else 1)


def _render_verify(d: dict, ui: Ui) -> None:
    ui.table(f"{d['file']} vs onnxruntime on {d['onnx']} (inputs: {d['inputs']})",
             ("output", "shape", "max abs err", "max rel err", "cosine", "out of tol",
              "argmax agrees", "passes", "note"),
             [(r["name"], fmt_shape(r["shape"]), num(r["max_abs"]), num(r["max_rel"]),
               num(r["cosine"]), _mismatch(r), _share(r["argmax_agree"]),
               "yes" if r["ok"] else "NO", r["note"])
              for r in d["outputs"]],
             numeric=("max abs err", "max rel err", "cosine", "out of tol", "argmax agrees"))
    ui.line(f"ran on {d['engine']} ({d['precision']} precision)"
            + (f"; precision plan: {d['plan']}" if d["plan"] else ""))
    verdict = "OK" if d["ok"] else "FAILED"
    checks = []
    if d["elementwise"]:
        checks.append(f"every element within atol {d['atol']:g} + rtol {d['rtol']:g} * "
                      "|reference|")
    if d["min_cosine"] is not None:
        checks.append(f"cosine >= {d['min_cosine']}")  # as given: 0.9999997 is not 1
    ui.line(f"{verdict}: {' and '.join(checks)} (max rel err is relative to the largest "
            "|reference| value; out of tol counts elements outside atol + rtol * |reference|)")
    for r in d["outputs"]:
        if r["ctc"] is not None:
            ui.line(_ctc_line(r["name"], r["ctc"]))
    if d["advice"]:
        ui.line(f"note: {d['advice']}")


def _ctc_line(name: str, c: dict) -> str:
    return (f"{name}: per-step class scores read as CTC, layout [{c['layout']}] (time axis "
            f"by {c['time_axis_from']}), blank {c['blank']}: greedy decodings identical in "
            f"{c['identical']} of {c['samples']} sample(s)"
            + (f" ({_share(c['agree'])})" if c["agree"] is not None else ""))


def _mismatch(r: dict) -> str:
    if r["mismatched"] is None:
        return ""
    return f"{r['mismatched']:,} ({_share(r['mismatched_share'])})"


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.2%}"
