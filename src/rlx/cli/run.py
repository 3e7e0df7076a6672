"""`rlx-bake run`: a `.rlx` file run on inputs from `.npy` / `.npz` files through `rlx.load`
(on any engine), each output summarised, timed, optionally profiled per node; and what
`verify` shares with it: the engine options and the load."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import threadpoolctl

from rlx.artifact.atomic import atomic_write
from rlx.artifact.output import check_writable
from rlx.cli.formatting import fmt_ms, fmt_shape
from rlx.cli.inputs import load_array, load_npz, positive_int
from rlx.cli.sign import add_trusted_key_option, trusted_keys
from rlx.cli.ui import CliError, Outcome, Ui, UsageError, add_password_options, password_from
from rlx.engines import Model, load
from rlx.engines.numpy_engine import NumpyRunner
from rlx.engines.registry import ENGINES, PRECISIONS
from rlx.ir import DType
from rlx.runtime.profile import OpProfile, profile_ops
from rlx.runtime.session import CompiledGraph
from rlx.weights.writers import write_npz

__all__ = ["add_commands", "add_engine_options", "load_for_run", "num", "summary"]

_FORMATTER = argparse.RawDescriptionHelpFormatter
REPEAT = 10
"""Timed runs after the first, by default: one run's time is noise, and the first pays
one-time costs (page faults on the mapped weights, plans, the allocator's first growth)."""


def add_engine_options(parser, also: tuple[str, ...] = ()) -> None:
    """--engine (one of `ENGINES`, or of `also`) and --precision."""
    group = parser.add_argument_group("engine")
    group.add_argument("--engine", choices=(*ENGINES, *also), default="numpy",
                       help="what runs the model: numpy (rlx's reference runtime, the "
                            "default), onnxruntime, openvino, or auto (the fastest installed, "
                            "measured once per model and machine and cached; -v shows it)")
    group.add_argument("--precision", choices=PRECISIONS, default="exact",
                       help="exact (f32, the default) or fast (the engine's faster default: "
                            "bf16 on OpenVINO with AMX)")


def uses_engine(args) -> bool:
    """Whether the options ask for something other than the numpy runtime, exact."""
    return args.engine != "numpy" or args.precision != "exact"


def load_for_run(path: str, password: str | bytes | None, args, ui: Ui
                 ) -> tuple[Model, dict[str, Any]]:
    """`rlx.load` on the engine the options name; the load and the numpy engine's compile
    timed apart (other engines prepare inside the load)."""
    with ui.step(f"loading {path} on {args.engine}"):
        start = time.perf_counter()
        model = load(path, engine=args.engine, precision=args.precision, password=password,
                     threads=getattr(args, "threads", None), trusted_keys=trusted_keys(args))
        seconds = time.perf_counter() - start
    runner = model.runner
    compiling = runner.compile_seconds if isinstance(runner, NumpyRunner) else 0.0
    timing: dict[str, Any] = {"load_ms": (seconds - compiling) * 1e3,
                              "compile_ms": compiling * 1e3}
    if uses_engine(args):
        timing.update(engine=model.engine, precision=model.precision)
    return model, timing


def _compiled(model: Model) -> CompiledGraph:
    """The numpy engine's compiled graph (what --profile-ops times)."""
    assert isinstance(model.runner, NumpyRunner)  # --profile-ops refuses other engines
    return model.runner.compiled


def _named_path(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH.npy, got {text!r}")
    return name, path


def _feeds(args) -> dict[str, np.ndarray]:
    if args.inputs or args.stream:
        return load_npz(args.inputs or args.stream)
    feeds: dict[str, np.ndarray] = {}
    for name, path in args.input or ():
        if name in feeds:
            raise CliError(f"input {name!r} is given twice")
        feeds[name] = load_array(path)
    return feeds


def _save_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    with atomic_write(path) as out:
        write_npz(out, arrays)


def summary(name: str, value: np.ndarray) -> dict[str, Any]:
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


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("run", parents=[common], formatter_class=_FORMATTER,
                       help="run a .rlx file on inputs from .npy/.npz files",
                       description="Run a .rlx file on the CPU and summarise each output.",
                       epilog="examples:\n  rlx-bake run model.rlx --input x=x.npy\n"
                              "  rlx-bake run model.rlx --inputs feeds.npz --output out.npz "
                              "--repeat 20\n"
                              "  rlx-bake run model.rlx --inputs feeds.npz --profile-ops "
                              "--repeat 20 --top 15\n"
                              "  rlx-bake run vad.rlx --stream chunks.npz --output probs.npz")
    p.add_argument("file", help="a .rlx file")
    given = p.add_mutually_exclusive_group()
    given.add_argument("--input", action="append", type=_named_path, metavar="NAME=PATH.npy",
                       help="one input (repeat the option for several)")
    given.add_argument("--inputs", metavar="FILE.npz", help="every input, by name, in one .npz")
    given.add_argument("--stream", metavar="FEEDS.npz",
                       help="run a sequence through a model that carries state (Model.stream: "
                            "outputs such as stateN fed back as the next step's state): inputs "
                            "with one more dim than declared are stepped along their first "
                            "axis, the others fed at every step; outputs summarised (and "
                            "saved) stacked over the steps")
    p.add_argument("--output", metavar="OUT.npz", help="save the outputs, by name, to an .npz")
    p.add_argument("--repeat", type=positive_int, metavar="N",
                   help="after a first run (timed on its own: it pays one-time costs), run "
                        "N times and report the median (default 10)")
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
        check_writable(args.output)
    password = password_from(args, ui)
    feeds = _feeds(args)
    if args.profile_ops and uses_engine(args):
        raise UsageError("--profile-ops times the numpy engine's nodes; "
                         "drop --engine/--precision", args.prog)
    if args.stream and (args.profile_ops or args.repeat is not None):
        raise UsageError("--stream runs its sequence once; drop --repeat/--profile-ops",
                         args.prog)
    repeat = args.repeat or REPEAT
    model, timing = load_for_run(args.file, password, args, ui)
    times, profile, stream = [], None, None
    with _thread_limit(args.threads):
        if args.stream:
            named, stream = _streamed(model, feeds, ui)
            times.append(stream["run_ms"])
        else:
            first, outputs = _timed(model, feeds)
            timing["first_run_ms"] = first
            for _ in ui.track(range(repeat), "running"):
                elapsed, outputs = _timed(model, feeds)
                times.append(elapsed)
            named = dict(zip((spec.name for spec in model.outputs), outputs))
            if args.profile_ops:
                profile = profile_ops(_compiled(model), feeds, repeat)
    if args.output:
        _save_npz(args.output, named)
    timing.update(run_ms_median=statistics.median(times), run_ms_min=min(times),
                  repeat=1 if args.stream else repeat)
    data = {"command": "run", "file": args.file,
            "inputs": [summary(k, v) for k, v in feeds.items()],
            "outputs": [summary(k, v) for k, v in named.items()],
            "timing": timing, "threads": args.threads, "saved_to": args.output,
            "stream": stream,
            "profile": None if profile is None else _profile_data(profile, args.top)}
    return Outcome(data, _render_run)


def _streamed(model: Model, feeds: Mapping[str, np.ndarray], ui: Ui
              ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The sequence once through `Model.stream()`: every output stacked over the steps, and
    what the stream fed back and how long the steps took."""
    stream = model.stream()
    names = [spec.name for spec in model.outputs]
    with ui.step(f"streaming {model.name} (state {stream.pairs})"):
        start = time.perf_counter()
        outputs = stream.run_sequence(feeds, names)
        seconds = time.perf_counter() - start
    steps = len(outputs[0])
    return dict(zip(names, outputs)), {"steps": steps, "pairs": stream.pairs,
                                       "run_ms": seconds * 1e3,
                                       "step_ms_mean": seconds * 1e3 / steps}


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
    return [(s["name"], fmt_shape(s["shape"]), s["dtype"], num(s["min"]), num(s["max"]),
             num(s["mean"]), s["nan"] or "") for s in summaries]


def num(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def _timed(model, feeds: dict) -> tuple[float, list]:
    """(milliseconds, outputs) of one run."""
    start = time.perf_counter()
    outputs = model.run(feeds)
    return (time.perf_counter() - start) * 1e3, outputs


def _render_run(d: dict, ui: Ui) -> None:
    t, stream = d["timing"], d["stream"]
    stacked = f", stacked over {stream['steps']} steps" if stream else ""
    ui.table(f"outputs of {d['file']}{stacked}",
             ("name", "shape", "dtype", "min", "max", "mean", "NaN"),
             _stats_rows(d["outputs"]), numeric=("min", "max", "mean", "NaN"))
    if stream:
        fed = ", ".join(f"{out} -> {name}" for out, name in stream["pairs"].items())
        runs = [(f"{stream['steps']} steps, state {fed}", fmt_ms(stream["run_ms"])),
                ("per step, mean", fmt_ms(stream["step_ms_mean"]))]
    else:
        runs = [("first run", fmt_ms(t["first_run_ms"])),
                (f"run, median of the next {t['repeat']}", fmt_ms(t["run_ms_median"])),
                ("run, fastest", fmt_ms(t["run_ms_min"]))]
    ui.pairs("timing", [("load (read_rlx)", fmt_ms(t["load_ms"])),
                        ("compile (checksums, materialise, compile)", fmt_ms(t["compile_ms"])),
                        *runs])
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
