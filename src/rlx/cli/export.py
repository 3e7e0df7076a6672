"""`rlx-bake export` and the `--engine` / `--precision` options of run and verify.

Kept apart from `cli_run` (which owns the run/verify output) so engines add a module,
not a rework: `cli_run` asks `load_for_cli` for something that runs like a CompiledGraph.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from rlx.cli.ui import (
    Outcome,
    Ui,
    add_password_options,
    check_output,
    fmt_bytes,
    password_from,
)
from rlx.engines.registry import ENGINES, PRECISIONS
from rlx.ir import DType, Shape

__all__ = ["add_commands", "add_engine_options", "load_for_cli", "uses_engine"]

_FORMATTER = argparse.RawDescriptionHelpFormatter


def add_engine_options(parser) -> None:
    group = parser.add_argument_group("engine")
    group.add_argument("--engine", choices=ENGINES, default="numpy",
                       help="what runs the model: numpy (rlx's reference runtime, the "
                            "default), onnxruntime, openvino, or auto (the fastest installed, "
                            "measured once per model and machine and cached; -v shows it)")
    group.add_argument("--precision", choices=PRECISIONS, default="exact",
                       help="exact (f32, the default) or fast (the engine's faster default: "
                            "bf16 on OpenVINO with AMX)")


def uses_engine(args) -> bool:
    """Whether the options ask for something other than the numpy runtime, exact."""
    return getattr(args, "engine", "numpy") != "numpy" or \
        getattr(args, "precision", "exact") != "exact"


class EngineRun:
    """A loaded `rlx.Model` with the part of CompiledGraph's interface run/verify use."""

    def __init__(self, model):
        self.model = model
        self.output_names = [o.name for o in model.outputs]
        self.input_names = [i.name for i in model.inputs]
        self.input_shapes = {i.name: Shape(i.shape, DType.from_numpy(i.dtype))
                             for i in model.inputs}

    def run(self, feeds) -> list[np.ndarray]:
        return self.model.run(feeds)


def load_for_cli(path: str, password: str | bytes | None, args,
                 ui: Ui) -> tuple[EngineRun, dict]:
    from rlx.engines.model import load

    with ui.step(f"loading {path} on {args.engine}"):
        start = time.perf_counter()
        model = load(path, engine=args.engine, precision=args.precision, password=password,
                     threads=getattr(args, "threads", None),
                     trusted_keys=getattr(args, "trusted_key", None) or None)
        done = time.perf_counter()
    return EngineRun(model), {"load_ms": (done - start) * 1e3, "compile_ms": 0.0,
                              "engine": model.engine, "precision": model.precision}


# --- export -------------------------------------------------------------------------------


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("export", parents=[common], formatter_class=_FORMATTER,
                       help="write a .rlx file as a standard ONNX model",
                       description="Export a baked .rlx file as ONNX (opset 20): weights of "
                                   "1 KiB and more go to OUT.onnx.data next to it.",
                       epilog="examples:\n  rlx-bake export model.rlx -o model.onnx\n"
                              "  rlx-bake export model.rlx -o model.onnx --packed dequantize")
    p.add_argument("file", help="a .rlx file")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="the ONNX file")
    p.add_argument("--packed", choices=("auto", "nbits", "decompress", "dequantize"),
                   default="auto",
                   help="packed Q8_0/TQ2_0 weights as com.microsoft.MatMulNBits (auto: when "
                        "the installed onnxruntime runs it), as int8 codes x scales in "
                        "standard ops, or dequantised to f32")
    add_password_options(p.add_argument_group("encrypted files"))
    p.set_defaults(run=_export)


def _export(args, ui: Ui) -> Outcome:
    from rlx.artifact import read_rlx
    from rlx.frontends.onnx.export import ExportSummary, export_onnx

    check_output(args.output)
    password = password_from(args, ui)
    summary = ExportSummary()
    with ui.step(f"exporting {args.file}"):
        file = read_rlx(args.file, password=password, verify="full")
        export_onnx(file, args.output, packed=None if args.packed == "auto" else args.packed,
                    summary=summary)
    data: dict[str, Any] = {"command": "export", "file": args.file, "output": args.output,
                            "opset": summary.opset, "nodes": summary.nodes,
                            "weights": summary.weights, "weight_bytes": summary.weight_bytes,
                            "packed": summary.packed}
    return Outcome(data, _render_export)


def _render_export(d: dict, ui: Ui) -> None:
    rows = [("ONNX file", d["output"]), ("opset", d["opset"]), ("nodes", d["nodes"]),
            ("weights", f"{d['weights']} ({fmt_bytes(d['weight_bytes'])})")]
    rows += [(f"packed: {how}", count) for how, count in sorted(d["packed"].items())]
    ui.pairs(f"{d['file']} exported", rows)
